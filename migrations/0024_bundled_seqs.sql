-- How far each stream of an attempt is stored in its bundles
-- (docs/ARCHITECTURE.md, "Artifacts"). A bundle deletes the chunks it
-- stored, so a chunk read again afterwards (a worker killed after it
-- stored a bundle and before its offsets were committed) was new to
-- `artifact_chunks` and became a late bundle: the same output stored
-- twice. Staging now skips a chunk at or below its stream's highest seq
-- stored (`{"stdout": 41, "stderr": 3}`).
ALTER TABLE artifact_bundles ADD COLUMN seqs jsonb NOT NULL DEFAULT '{}';
