-- Issue 29, step 6: the books read an item's payments in its snapshot and the
-- control room sums them per sale, both by item_id.
ALTER TABLE payments ADD KEY idx_payments_item (item_id);
