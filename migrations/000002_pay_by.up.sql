-- The payment deadline, set in the same transaction that takes the order's
-- unit from the stock row and moves it to PENDING_PAYMENT (MySQL's clock).
-- The API judges a pay or cancel against it at the door; the saga closes an
-- unpaid order only once it has passed (plus a grace for in-flight pays).
ALTER TABLE seckill_order ADD COLUMN pay_by DATETIME(3) NULL AFTER reason;
