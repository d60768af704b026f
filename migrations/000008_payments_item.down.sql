ALTER TABLE payments DROP KEY idx_payments_item;
