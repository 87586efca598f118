-- The files a runner stored for an attempt, as its final report listed
-- them and the `finished` event records them (name, class, media type,
-- size, sha256, storage key). The artifact worker records them as refs.
ALTER TABLE attempts ADD COLUMN outputs jsonb NOT NULL DEFAULT '[]';
