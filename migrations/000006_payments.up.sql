-- Issue 29, step 2: the provider payments of an order and the provider's
-- notifications the door has taken. Amounts are integer minor units.
-- payments: one row per provider payment, created at checkout. user_id,
-- item_id and pay_by are the order's as proven at checkout: a notification
-- for an order the saga has not persisted yet writes the row a door pay
-- would. status: pending, succeeded, canceled, or mismatch (a success of
-- another amount or currency: never PAID, to be refunded).
CREATE TABLE payments (
    id                  BIGINT        NOT NULL AUTO_INCREMENT,
    order_id            VARCHAR(32)   NOT NULL,
    user_id             BIGINT        NOT NULL,
    item_id             BIGINT        NOT NULL,
    provider            VARCHAR(20)   NOT NULL,
    provider_payment_id VARCHAR(255)  NOT NULL,
    amount              BIGINT        NOT NULL,
    currency            CHAR(3)       NOT NULL,
    status              VARCHAR(20)   NOT NULL,
    checkout_url        VARCHAR(1024) NOT NULL DEFAULT '',
    pay_by              DATETIME(3)   NOT NULL,
    succeeded_at        DATETIME(3)   NULL,
    created_at          DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at          DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    UNIQUE KEY uk_payments_provider_id (provider, provider_payment_id),
    KEY idx_payments_order (order_id),
    CONSTRAINT chk_payments_amount CHECK (amount > 0),
    CONSTRAINT chk_payments_status CHECK (status IN ('pending', 'succeeded', 'canceled', 'mismatch'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- payment_events: every notification taken, by the provider's event id: a
-- resent event meets its row and is dropped. Written in the transaction that
-- decides on it.
CREATE TABLE payment_events (
    event_id    VARCHAR(255) NOT NULL,
    type        VARCHAR(64)  NOT NULL,
    payment_id  VARCHAR(255) NOT NULL DEFAULT '',
    received_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (event_id),
    KEY idx_payment_events_payment (payment_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
