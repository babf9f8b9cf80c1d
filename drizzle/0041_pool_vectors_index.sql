-- The vector ranking of a pool reads every ready vector of the pool's current model (an exact
-- scan: no approximation). Through embeddings_pool_idx each one is a visit to its wide row
-- (hash, lease, error and timestamps beside the vector); this index holds what the ranking
-- reads, so the scan is index-only (on the embedded database, 100,000 facts in pools of 10,000,
-- the statement took about a third less). A B-tree entry holds at most about 2,700 bytes: vectors
-- of up to 512 dimensions (2 KB) are kept here, larger ones are read from the table as before.
-- Only where the vector column exists (pgvector).
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM information_schema.columns
             WHERE table_schema = current_schema() AND table_name = 'embeddings' AND column_name = 'vector') THEN
    EXECUTE 'CREATE INDEX IF NOT EXISTS embeddings_pool_vectors_idx ON embeddings '
         || '(org_id, pool_id, kind, model, dimensions) INCLUDE (item_id, vector) '
         || 'WHERE state = ''ready'' AND dimensions <= 512';
  END IF;
END $$;
