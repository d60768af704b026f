# The one seckill binary; the role is the command (api, worker, migrate, ...).
# The Stripe stand-in (cmd/seckill-stripe), for development only, is an image
# of its own: docker build --target stripe-standin (docker-compose's stripe).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/seckill ./cmd/seckill && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/seckill-stripe ./cmd/seckill-stripe

FROM gcr.io/distroless/static-debian12:nonroot AS stripe-standin
COPY --from=build /out/seckill-stripe /seckill-stripe
ENTRYPOINT ["/seckill-stripe"]

# The shipping image: the default target, the last stage.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/seckill /seckill
ENTRYPOINT ["/seckill"]
