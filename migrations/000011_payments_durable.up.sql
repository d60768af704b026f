-- Durable before the provider: a payment's row is committed (pending) with
-- every parameter the provider is sent before the provider is asked to
-- create it; until the provider names it, provider_payment_id holds the
-- placeholder 'key:<idempotency key>'. A retry — the buyer's checkout again,
-- or the saga's cancel-first at the close — replays the create with the
-- same key and the same stored parameters, then names the row.
ALTER TABLE payments
    ADD COLUMN idempotency_key VARCHAR(255)  NOT NULL DEFAULT '' AFTER provider_payment_id,
    ADD COLUMN name            VARCHAR(255)  NOT NULL DEFAULT '' AFTER currency,
    ADD COLUMN return_url      VARCHAR(1024) NOT NULL DEFAULT '' AFTER checkout_url,
    ADD COLUMN expires_at      DATETIME(3)   NULL AFTER pay_by;
