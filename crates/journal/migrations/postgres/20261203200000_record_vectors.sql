-- A record's vector (little-endian f32s) and the embeddings model it came from, for searches by
-- meaning beside full text.
ALTER TABLE records ADD COLUMN embedding BYTEA;
ALTER TABLE records ADD COLUMN embedding_model TEXT;
