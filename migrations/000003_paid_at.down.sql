-- REFUNDED orders become FAILED (their reason says why), so the old
-- constraint holds again.
UPDATE seckill_order SET status = 'FAILED' WHERE status = 'REFUNDED';
ALTER TABLE seckill_order DROP CONSTRAINT chk_order_status;
ALTER TABLE seckill_order ADD CONSTRAINT chk_order_status
    CHECK (status IN ('QUEUED', 'PENDING_PAYMENT', 'PAID', 'CANCELLED', 'FAILED'));
ALTER TABLE seckill_order DROP COLUMN paid_at;
