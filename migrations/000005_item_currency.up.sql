-- The currency of an item's price (ISO 4217, upper case): prices and payments
-- are integer minor units of it (issue 29's payment provider asks for amount
-- and currency). Items created before it, and items created without one, are
-- EUR, the default of SECKILL_PAYMENT_CURRENCY.
ALTER TABLE item ADD COLUMN currency CHAR(3) NOT NULL DEFAULT 'EUR' AFTER price_cents;
