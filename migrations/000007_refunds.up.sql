-- Issue 29, step 3: the refunds the saga makes through the provider. One
-- per payment (uk_refunds_payment): its idempotency key at the provider is
-- refund-<provider payment id>, so the saga, a late notification's refund
-- workflow and any retry of either meet the same refund. status: pending
-- (asked, not confirmed yet), succeeded, failed (the provider refused it).
CREATE TABLE refunds (
    id                  BIGINT        NOT NULL AUTO_INCREMENT,
    order_id            VARCHAR(32)   NOT NULL,
    payment_id          BIGINT        NOT NULL,
    provider_payment_id VARCHAR(255)  NOT NULL,
    provider_refund_id  VARCHAR(255)  NOT NULL DEFAULT '',
    amount              BIGINT        NOT NULL,
    currency            CHAR(3)       NOT NULL,
    status              VARCHAR(20)   NOT NULL,
    reason              VARCHAR(255)  NOT NULL DEFAULT '',
    created_at          DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at          DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    UNIQUE KEY uk_refunds_payment (payment_id),
    KEY idx_refunds_order (order_id),
    CONSTRAINT chk_refunds_status CHECK (status IN ('pending', 'succeeded', 'failed'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
