-- Issue 30, item 2: the transactional outbox of the orders' settled changes
-- (PAID, CANCELLED, FAILED, REFUNDED), written in the transaction that makes
-- the change and published to RocketMQ by the worker (docs/events.md).
-- event_id is <order_id>:<status> (a status is reached at most once per
-- order): a retried write meets its row. seq counts an order's events from 1.
-- published_at stays NULL until the broker stored the message.
CREATE TABLE order_events (
    id           BIGINT        NOT NULL AUTO_INCREMENT,
    event_id     VARCHAR(64)   NOT NULL,
    order_id     VARCHAR(32)   NOT NULL,
    seq          INT           NOT NULL,
    status       VARCHAR(20)   NOT NULL,
    payload      VARCHAR(2048) NOT NULL,
    created_at   DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    published_at DATETIME(3)   NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_order_events_event (event_id),
    UNIQUE KEY uk_order_events_seq (order_id, seq),
    KEY idx_order_events_unpublished (published_at, id),
    KEY idx_order_events_created (created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
