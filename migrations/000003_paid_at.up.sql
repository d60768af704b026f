-- Early payment: a buyer may pay an order while it is still QUEUED (from its
-- 202 on). The payment is recorded on the QUEUED row as paid_at; the
-- transaction that takes the order's unit from the stock row makes it PAID,
-- so a PAID row always holds a unit. A paid order the stock row has no unit
-- for (a phantom unit after a Redis failover) ends REFUNDED.
ALTER TABLE seckill_order ADD COLUMN paid_at DATETIME(3) NULL AFTER pay_by;
ALTER TABLE seckill_order DROP CONSTRAINT chk_order_status;
ALTER TABLE seckill_order ADD CONSTRAINT chk_order_status
    CHECK (status IN ('QUEUED', 'PENDING_PAYMENT', 'PAID', 'CANCELLED', 'FAILED', 'REFUNDED'));
