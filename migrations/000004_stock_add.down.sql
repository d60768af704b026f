ALTER TABLE item DROP COLUMN end_key;
DROP TABLE stock_add;
