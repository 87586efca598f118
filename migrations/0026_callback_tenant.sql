-- The tenant of each callback, as a column of its own: the callback
-- worker claims none of a tenant that has its share of deliveries in
-- flight (docs/EVENTS.md, "Callbacks"), and read from the body, which
-- holds the attempt's result and is often stored out of line, the
-- filter would have read every such body a claim passed over. Topic
-- callbacks, whose record is elsewhere, have none ('').
ALTER TABLE callbacks
    ADD COLUMN tenant text GENERATED ALWAYS AS (coalesce(body->>'tenant', '')) STORED;
