-- A new fact no longer gets its row in `embeddings` from a trigger (a statement trigger with a
-- transition table, an upsert and a foreign-key check on every insert cost adding a fact about
-- a quarter of its speed). It is written with `embedding_queued = false`, which puts it in a
-- small partial index; the embedding job takes such facts in before it claims work, by setting
-- the flag: the update trigger (kept, as an edit needs it) makes their rows pending in that
-- same statement.
-- Facts already here have their rows (the trigger or the back-fill made them): true for them,
-- without rewriting the table; false for every fact written from now on.
ALTER TABLE "memory_items" ADD COLUMN "embedding_queued" boolean DEFAULT true NOT NULL;--> statement-breakpoint
ALTER TABLE "memory_items" ALTER COLUMN "embedding_queued" SET DEFAULT false;--> statement-breakpoint
CREATE INDEX "memory_items_embedding_due_idx" ON "memory_items" USING btree ("id") WHERE not embedding_queued;--> statement-breakpoint
DROP TRIGGER IF EXISTS memory_items_embed_insert ON memory_items;
