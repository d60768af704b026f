ALTER TABLE payments
    DROP COLUMN expires_at,
    DROP COLUMN return_url,
    DROP COLUMN name,
    DROP COLUMN idempotency_key;
