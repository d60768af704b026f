ALTER TABLE refunds
    DROP KEY idx_refunds_status,
    DROP COLUMN last_error,
    DROP COLUMN attempt,
    DROP COLUMN asked_by;
