-- The earliest armed deadline, or NULL: the sweeper's probe before it
-- opens a transaction. No parameter, so every plan the server may cache is
-- the one that reads the first entry of `attempts_next_deadline`. (The
-- probe it replaces, `EXISTS (... WHERE next_deadline <= $1)`, got a
-- cached generic plan that scanned every attempt when none was due.)
SELECT min(next_deadline) FROM attempts
