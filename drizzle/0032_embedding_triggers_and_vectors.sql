-- What each kind embeds: a fact's content; a record's title and the start of its body (an
-- embedding model reads a few thousand words at most); a chunk's heading path and text. The
-- embedding worker reads texts through the same functions, so its hash matches the trigger's.
CREATE OR REPLACE FUNCTION cairn_text_hash(t text) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT encode(sha256(convert_to(t, 'UTF8')), 'hex') $$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION cairn_record_text(title text, body text) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT title || E'\n\n' || left(body, 8000) $$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION cairn_chunk_text(heading text, body text) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT CASE WHEN heading = '' THEN body ELSE heading || E'\n\n' || body END $$;
--> statement-breakpoint
-- One statement-level trigger per table and event: a write of many rows (a capture's facts, a
-- document's chunks) adds one INSERT … SELECT, not one per row. A changed text makes its row
-- pending again (its vector forgotten: see below), free of any lease, with a fresh budget.
CREATE OR REPLACE FUNCTION cairn_embeddings_memory_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO embeddings (org_id, kind, item_id, pool_id, text_hash)
  SELECT n.org_id, 'memory', n.id, n.pool_id, cairn_text_hash(n.content) FROM new_rows n
  ON CONFLICT (kind, item_id) DO UPDATE
    SET text_hash = excluded.text_hash, pool_id = excluded.pool_id, state = 'pending', model = NULL, dimensions = NULL,
        attempts = 0, last_error = NULL, next_attempt_at = now(), lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
    WHERE embeddings.text_hash <> excluded.text_hash OR embeddings.pool_id <> excluded.pool_id;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION cairn_embeddings_record_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO embeddings (org_id, kind, item_id, pool_id, text_hash)
  SELECT n.org_id, 'record', n.id, '', cairn_text_hash(cairn_record_text(n.title, n.body)) FROM new_rows n
  ON CONFLICT (kind, item_id) DO UPDATE
    SET text_hash = excluded.text_hash, state = 'pending', model = NULL, dimensions = NULL,
        attempts = 0, last_error = NULL, next_attempt_at = now(), lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
    WHERE embeddings.text_hash <> excluded.text_hash;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION cairn_embeddings_chunk_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO embeddings (org_id, kind, item_id, pool_id, text_hash)
  SELECT n.org_id, 'chunk', n.id, '', cairn_text_hash(cairn_chunk_text(n.heading, n.text)) FROM new_rows n
  ON CONFLICT (kind, item_id) DO UPDATE
    SET text_hash = excluded.text_hash, state = 'pending', model = NULL, dimensions = NULL,
        attempts = 0, last_error = NULL, next_attempt_at = now(), lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
    WHERE embeddings.text_hash <> excluded.text_hash;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION cairn_embeddings_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM embeddings e USING old_rows o WHERE e.kind = TG_ARGV[0] AND e.item_id = o.id;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER memory_items_embed_insert AFTER INSERT ON memory_items
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION cairn_embeddings_memory_written();
--> statement-breakpoint
CREATE TRIGGER memory_items_embed_update AFTER UPDATE ON memory_items
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION cairn_embeddings_memory_written();
--> statement-breakpoint
CREATE TRIGGER memory_items_embed_delete AFTER DELETE ON memory_items
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION cairn_embeddings_deleted('memory');
--> statement-breakpoint
CREATE TRIGGER knowledge_records_embed_insert AFTER INSERT ON knowledge_records
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION cairn_embeddings_record_written();
--> statement-breakpoint
CREATE TRIGGER knowledge_records_embed_update AFTER UPDATE ON knowledge_records
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION cairn_embeddings_record_written();
--> statement-breakpoint
CREATE TRIGGER knowledge_records_embed_delete AFTER DELETE ON knowledge_records
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION cairn_embeddings_deleted('record');
--> statement-breakpoint
CREATE TRIGGER knowledge_chunks_embed_insert AFTER INSERT ON knowledge_chunks
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION cairn_embeddings_chunk_written();
--> statement-breakpoint
CREATE TRIGGER knowledge_chunks_embed_update AFTER UPDATE ON knowledge_chunks
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION cairn_embeddings_chunk_written();
--> statement-breakpoint
CREATE TRIGGER knowledge_chunks_embed_delete AFTER DELETE ON knowledge_chunks
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION cairn_embeddings_deleted('chunk');
--> statement-breakpoint
-- Existing texts are embedded too (back-fill): pending rows the worker takes in turn.
INSERT INTO embeddings (org_id, kind, item_id, pool_id, text_hash)
SELECT org_id, 'memory', id, pool_id, cairn_text_hash(content) FROM memory_items
UNION ALL
SELECT org_id, 'record', id, '', cairn_text_hash(cairn_record_text(title, body)) FROM knowledge_records
UNION ALL
SELECT org_id, 'chunk', id, '', cairn_text_hash(cairn_chunk_text(heading, text)) FROM knowledge_chunks
ON CONFLICT DO NOTHING;
--> statement-breakpoint
-- pgvector where the server has it: always on the embedded database; on PostgreSQL when the
-- extension is installed (and this role may create it). Elsewhere the column is not made and
-- search matches words only; the start log says why.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')
     AND EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
    BEGIN
      CREATE EXTENSION IF NOT EXISTS vector;
    EXCEPTION WHEN OTHERS THEN
      RAISE NOTICE 'pgvector is installed but could not be created here (%): search will match words only', SQLERRM;
    END;
  END IF;
  IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') THEN
    EXECUTE 'ALTER TABLE embeddings ADD COLUMN IF NOT EXISTS vector vector';
    -- a vector never outlives the text it was made from: a new text hash forgets it
    EXECUTE $f$
      CREATE OR REPLACE FUNCTION cairn_embeddings_forget_vector() RETURNS trigger LANGUAGE plpgsql AS $b$
      BEGIN
        NEW.vector := NULL;
        RETURN NEW;
      END $b$ $f$;
    EXECUTE 'CREATE TRIGGER embeddings_forget_vector BEFORE UPDATE OF text_hash ON embeddings FOR EACH ROW '
         || 'WHEN (OLD.text_hash IS DISTINCT FROM NEW.text_hash) EXECUTE FUNCTION cairn_embeddings_forget_vector()';
  END IF;
END $$;
