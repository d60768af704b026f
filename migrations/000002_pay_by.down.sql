ALTER TABLE seckill_order DROP COLUMN pay_by;
