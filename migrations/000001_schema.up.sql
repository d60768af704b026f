-- The schema every stage builds on. Names and columns are a contract (see docs/design.md).
CREATE TABLE item (
    id                      BIGINT       NOT NULL AUTO_INCREMENT,
    name                    VARCHAR(200) NOT NULL,
    price_cents             BIGINT       NOT NULL,
    stock_total             INT          NOT NULL,
    start_at                DATETIME(3)  NOT NULL,
    end_at                  DATETIME(3)  NOT NULL,
    payment_timeout_seconds INT          NOT NULL DEFAULT 900,
    created_at              DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    CONSTRAINT chk_item_price CHECK (price_cents >= 0),
    CONSTRAINT chk_item_stock CHECK (stock_total > 0),
    CONSTRAINT chk_item_window CHECK (start_at < end_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- The optimistic-lock row: every saga decrements it with
-- UPDATE stock SET stock=stock-1, version=version+1 WHERE item_id=? AND version=? AND stock>0.
CREATE TABLE stock (
    id      BIGINT NOT NULL AUTO_INCREMENT,
    item_id BIGINT NOT NULL,
    stock   INT    NOT NULL,
    version BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (id),
    UNIQUE KEY uk_stock_item (item_id),
    CONSTRAINT chk_stock_nonneg CHECK (stock >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- One order per buyer per item, ever (uk_order_user_item), whatever its status.
CREATE TABLE seckill_order (
    id         BIGINT       NOT NULL AUTO_INCREMENT,
    order_id   VARCHAR(32)  NOT NULL,
    user_id    BIGINT       NOT NULL,
    item_id    BIGINT       NOT NULL,
    status     VARCHAR(20)  NOT NULL,
    reason     VARCHAR(512) NOT NULL DEFAULT '',
    created_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    UNIQUE KEY uk_order_order_id (order_id),
    UNIQUE KEY uk_order_user_item (user_id, item_id),
    KEY idx_order_item_status (item_id, status),
    CONSTRAINT chk_order_status CHECK (status IN ('QUEUED', 'PENDING_PAYMENT', 'PAID', 'CANCELLED', 'FAILED'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- Which orders took a unit from the stock row: written in the same transaction
-- as the decrement, so a retried decrement (or restore) never applies twice.
CREATE TABLE stock_deduction (
    order_id   VARCHAR(32) NOT NULL,
    item_id    BIGINT      NOT NULL,
    restored   BOOLEAN     NOT NULL DEFAULT FALSE,
    created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
    PRIMARY KEY (order_id),
    KEY idx_deduction_item (item_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
