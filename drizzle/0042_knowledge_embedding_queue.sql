-- Knowledge records and document chunks join the facts' queue (0040_fact_embedding_queue): a new
-- one no longer gets its row in `embeddings` from an insert trigger (a statement trigger with a
-- transition table and an upsert on every write of a record or of a document's chunks); it is
-- written with `embedding_queued = false`, which puts it in a small partial index, and the
-- embedding job takes it in by setting the flag: the update trigger (kept, as an edit needs it)
-- makes its row pending in that same statement. A delete still deletes the row (none yet: nothing).
-- Records and chunks already here have their rows (the trigger or the back-fill made them): true
-- for them, without rewriting the table; false for every one written from now on.
ALTER TABLE "knowledge_records" ADD COLUMN "embedding_queued" boolean DEFAULT true NOT NULL;--> statement-breakpoint
ALTER TABLE "knowledge_records" ALTER COLUMN "embedding_queued" SET DEFAULT false;--> statement-breakpoint
ALTER TABLE "knowledge_chunks" ADD COLUMN "embedding_queued" boolean DEFAULT true NOT NULL;--> statement-breakpoint
ALTER TABLE "knowledge_chunks" ALTER COLUMN "embedding_queued" SET DEFAULT false;--> statement-breakpoint
CREATE INDEX "knowledge_records_embedding_due_idx" ON "knowledge_records" USING btree ("id") WHERE not embedding_queued;--> statement-breakpoint
CREATE INDEX "knowledge_chunks_embedding_due_idx" ON "knowledge_chunks" USING btree ("id") WHERE not embedding_queued;--> statement-breakpoint
DROP TRIGGER IF EXISTS knowledge_records_embed_insert ON knowledge_records;--> statement-breakpoint
DROP TRIGGER IF EXISTS knowledge_chunks_embed_insert ON knowledge_chunks;
