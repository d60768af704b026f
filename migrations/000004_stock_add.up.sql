-- Sale controls a retry must not apply twice.
-- stock_add: one row per applied POST /api/v1/items/:id/stock, written in the
-- add's own transaction. A retry with the same Idempotency-Key finds it and
-- changes nothing; after an unknown commit outcome, its add_id (the Redis add)
-- tells whether the add committed before anything is undone.
CREATE TABLE stock_add (
    add_id           VARCHAR(32)  NOT NULL,
    item_id          BIGINT       NOT NULL,
    idempotency_key  VARCHAR(200) NULL,
    units            INT          NOT NULL,
    stock_total      INT          NOT NULL,
    created_at       DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (add_id),
    UNIQUE KEY uk_stock_add_key (item_id, idempotency_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- end_key: the Idempotency-Key of the request whose UPDATE ended the sale,
-- written by that UPDATE, so its retry is answered 200 whatever happened to
-- the announcement.
ALTER TABLE item ADD COLUMN end_key VARCHAR(200) NULL AFTER end_at;
