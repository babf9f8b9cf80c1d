CREATE TABLE "knowledge_chunks" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"document_id" text NOT NULL,
	"idx" integer NOT NULL,
	"heading" text NOT NULL,
	"text" text NOT NULL,
	"search_vector" "tsvector" GENERATED ALWAYS AS (setweight(to_tsvector('english', heading), 'A') || setweight(to_tsvector('english', text), 'B')) STORED NOT NULL
);
--> statement-breakpoint
CREATE TABLE "knowledge_documents" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"name" text NOT NULL,
	"kind" text NOT NULL,
	"content_type" text NOT NULL,
	"size" bigint NOT NULL,
	"sha256" text NOT NULL,
	"state" text DEFAULT 'queued' NOT NULL,
	"chunk_count" integer DEFAULT 0 NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"max_attempts" integer NOT NULL,
	"last_error" text,
	"lease_owner" text,
	"lease_expires_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"created_by" text,
	CONSTRAINT "knowledge_documents_state_check" CHECK ("knowledge_documents"."state" in ('queued', 'processing', 'ready', 'failed'))
);
--> statement-breakpoint
CREATE TABLE "knowledge_drafts" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"title" text NOT NULL,
	"body" text NOT NULL,
	"tags" text[] DEFAULT '{}'::text[] NOT NULL,
	"target_record_id" text,
	"state" text DEFAULT 'open' NOT NULL,
	"run_id" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"created_by" text,
	"decided_at" timestamp with time zone,
	"decided_by" text,
	CONSTRAINT "knowledge_drafts_state_check" CHECK ("knowledge_drafts"."state" in ('open', 'approved', 'rejected'))
);
--> statement-breakpoint
CREATE TABLE "knowledge_generations" (
	"org_id" text PRIMARY KEY NOT NULL,
	"generation" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "knowledge_record_history" (
	"org_id" text NOT NULL,
	"record_id" text NOT NULL,
	"seq" integer NOT NULL,
	"version" integer NOT NULL,
	"title" text NOT NULL,
	"body" text NOT NULL,
	"kind" text NOT NULL,
	"changed_by" text,
	"changed_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "knowledge_record_history_org_id_record_id_seq_pk" PRIMARY KEY("org_id","record_id","seq"),
	CONSTRAINT "knowledge_record_history_kind_check" CHECK ("knowledge_record_history"."kind" in ('created', 'updated', 'deleted'))
);
--> statement-breakpoint
CREATE TABLE "knowledge_records" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"title" text NOT NULL,
	"body" text NOT NULL,
	"tags" text[] DEFAULT '{}'::text[] NOT NULL,
	"source" jsonb NOT NULL,
	"version" integer DEFAULT 1 NOT NULL,
	"search_vector" "tsvector" GENERATED ALWAYS AS (setweight(to_tsvector('english', title), 'A') || setweight(to_tsvector('english', body), 'B')) STORED NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"created_by" text
);
--> statement-breakpoint
CREATE TABLE "knowledge_words" (
	"org_id" text NOT NULL,
	"word" text NOT NULL,
	CONSTRAINT "knowledge_words_org_id_word_pk" PRIMARY KEY("org_id","word")
);
--> statement-breakpoint
ALTER TABLE "knowledge_chunks" ADD CONSTRAINT "knowledge_chunks_document_id_knowledge_documents_id_fk" FOREIGN KEY ("document_id") REFERENCES "public"."knowledge_documents"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "knowledge_documents" ADD CONSTRAINT "knowledge_documents_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "knowledge_drafts" ADD CONSTRAINT "knowledge_drafts_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "knowledge_generations" ADD CONSTRAINT "knowledge_generations_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "knowledge_record_history" ADD CONSTRAINT "knowledge_record_history_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "knowledge_records" ADD CONSTRAINT "knowledge_records_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "knowledge_words" ADD CONSTRAINT "knowledge_words_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "knowledge_chunks_document_idx" ON "knowledge_chunks" USING btree ("document_id","idx");--> statement-breakpoint
CREATE INDEX "knowledge_chunks_org_idx" ON "knowledge_chunks" USING btree ("org_id");--> statement-breakpoint
CREATE INDEX "knowledge_chunks_search_idx" ON "knowledge_chunks" USING gin ("search_vector");--> statement-breakpoint
CREATE INDEX "knowledge_documents_org_idx" ON "knowledge_documents" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "knowledge_documents_blob_idx" ON "knowledge_documents" USING btree ("org_id","sha256");--> statement-breakpoint
CREATE INDEX "knowledge_documents_pending_idx" ON "knowledge_documents" USING btree ("state","created_at") WHERE state in ('queued', 'processing');--> statement-breakpoint
CREATE INDEX "knowledge_drafts_org_idx" ON "knowledge_drafts" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "knowledge_records_org_idx" ON "knowledge_records" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "knowledge_records_tags_idx" ON "knowledge_records" USING gin ("tags");--> statement-breakpoint
CREATE INDEX "knowledge_records_search_idx" ON "knowledge_records" USING gin ("search_vector");--> statement-breakpoint
CREATE INDEX "knowledge_words_trgm_idx" ON "knowledge_words" USING gin ("word" gin_trgm_ops);