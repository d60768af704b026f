-- Owed refunds are rows: the decision that owes money back (a notification
-- the door cannot take, the close of an order whose payment took money, a
-- support refund) writes the refund row in its own transaction; the saga's
-- RefundPayment and the worker's refund driver take every row to the
-- provider until it confirms it. asked_by: who owed it (notification, saga,
-- support:<admin>, reconcile). attempt: how many refunds the provider
-- failed for good before this one (the idempotency key of the next is
-- refund-<provider payment id>-<attempt>). last_error: the provider's last
-- answer, for support.
ALTER TABLE refunds
    ADD COLUMN asked_by   VARCHAR(64)  NOT NULL DEFAULT '' AFTER reason,
    ADD COLUMN attempt    INT          NOT NULL DEFAULT 0 AFTER asked_by,
    ADD COLUMN last_error VARCHAR(512) NOT NULL DEFAULT '' AFTER attempt,
    ADD KEY idx_refunds_status (status, updated_at);
