DROP TABLE order_events;
