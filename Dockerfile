# The one seckill binary; the role is the command (api, worker, migrate, ...).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/seckill ./cmd/seckill

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/seckill /seckill
ENTRYPOINT ["/seckill"]
