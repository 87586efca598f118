-- Which seqs of each stream of an attempt its bundles hold
-- (docs/ARCHITECTURE.md, "Artifacts"). A bundle deletes the chunks it
-- stored, so a chunk read again afterwards (a worker killed after it
-- stored a bundle and before its offsets were committed) was new to
-- `artifact_chunks` and became a late bundle: the same output stored
-- twice. Staging now skips a chunk its stream's bundles hold, as ranges
-- of seqs (`{"stdout": [[0, 41]], "stderr": [[0, 3]]}`); a chunk between
-- them, still on its way when the bundle was made, is kept, late.
ALTER TABLE artifact_bundles ADD COLUMN seqs jsonb NOT NULL DEFAULT '{}';
