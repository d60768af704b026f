# seckill — the two commands that matter: `make run` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

.PHONY: help run stop test lint bench build stack-up stack-down stack-status fuzz

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'
	@echo "  PROFILE=cluster    with run, stop, bench and stack-*: the clustered stack (scripts/stack --profile cluster)"

# PROFILE=cluster: the clustered stack (scripts/stack --profile cluster) instead of the default one
STACK_PROFILE = $(if $(PROFILE),--profile $(PROFILE))

run: ## install + start the services (Prometheus included), migrate, start api and worker, run a demo sale, print the URLs
	@scripts/run $(STACK_PROFILE)

stop: ## stop the api and worker started by `make run` (services keep running)
	@scripts/run stop $(STACK_PROFILE)

test: ## start the services if needed, lint, then every test in three lanes side by side: failover (on a stack of its own), unit + integration (-race), then the cluster and secure profiles
	@scripts/test

lint: ## go vet, the layering test (test/arch), staticcheck, errcheck, workflowcheck, promtool (the Prometheus config and the alert rules' unit tests)
	@scripts/lint

bench: ## every stage against its own baseline on the local stack (see docs/performance.md)
	@scripts/bench $(STACK_PROFILE)

build: ## build bin/seckill, bin/seckill-bench, bin/seckill-demo, bin/seckill-nemesis and bin/seckill-stripe (the Stripe stand-in)
	@go build -o bin/seckill ./cmd/seckill
	@go build -o bin/seckill-bench ./cmd/seckill-bench
	@go build -o bin/seckill-demo ./cmd/seckill-demo
	@go build -o bin/seckill-nemesis ./cmd/seckill-nemesis
	@go build -o bin/seckill-stripe ./cmd/seckill-stripe

fuzz: ## every fuzz target for a while: each handler on in-memory fakes, then purchase and item create on the local stack
	@for t in FuzzUnitItems FuzzUnitPurchase FuzzUnitOrders FuzzUnitRouter; do \
		go test -run=XXX -fuzz="^$$t\$$" -fuzztime=30s ./api/ || exit 1; done
	@go test -run=XXX -fuzz='^FuzzPurchase$$' -fuzztime=60s ./api/
	@go test -run=XXX -fuzz='^FuzzCreateItem$$' -fuzztime=60s ./api/

stack-up: ## start Redis, MariaDB, RocketMQ, Temporal and Prometheus (installing what is missing)
	@scripts/stack up $(STACK_PROFILE)

stack-down: ## stop `make run` roles and every service scripts/stack started
	@scripts/run stop $(STACK_PROFILE) || true
	@scripts/stack down $(STACK_PROFILE)

stack-status: ## one line per service
	@scripts/stack status $(STACK_PROFILE)
