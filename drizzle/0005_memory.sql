CREATE TABLE "memory_captures" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"run_id" text NOT NULL,
	"root_run_id" text NOT NULL,
	"state" text NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"max_attempts" integer NOT NULL,
	"last_error" text,
	"item_count" integer NOT NULL,
	"facts" jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"next_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
	"delivered_at" timestamp with time zone,
	"lease_expires_at" timestamp with time zone,
	CONSTRAINT "memory_captures_state_check" CHECK ("memory_captures"."state" in ('pending', 'delivering', 'delivered', 'dead', 'discarded'))
);
--> statement-breakpoint
CREATE TABLE "memory_item_history" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"pool_id" text NOT NULL,
	"item_id" text NOT NULL,
	"content" text NOT NULL,
	"kind" text NOT NULL,
	"changed_by" text NOT NULL,
	"changed_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "memory_items" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"pool_id" text NOT NULL,
	"content" text NOT NULL,
	"content_hash" text NOT NULL,
	"search_vector" "tsvector" GENERATED ALWAYS AS (to_tsvector('english', content)) STORED NOT NULL,
	"background" boolean DEFAULT false NOT NULL,
	"source_run_id" text,
	"root_run_id" text,
	"capture_id" text,
	"fact_index" integer,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "memory_pools" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"scope" text NOT NULL,
	"owner_key" text NOT NULL,
	"item_count" integer DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "memory_pools_scope_check" CHECK (("memory_pools"."scope" = 'org' and "memory_pools"."owner_key" = '') or ("memory_pools"."scope" = 'personal' and "memory_pools"."owner_key" <> ''))
);
--> statement-breakpoint
CREATE TABLE "memory_recalls" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"run_id" text NOT NULL,
	"root_run_id" text NOT NULL,
	"scope" text NOT NULL,
	"query" text NOT NULL,
	"item_ids" jsonb NOT NULL,
	"latency_ms" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "memory_settings" (
	"org_id" text PRIMARY KEY NOT NULL,
	"enabled" boolean NOT NULL,
	"updated_by" text NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "memory_words" (
	"pool_id" text NOT NULL,
	"word" text NOT NULL,
	CONSTRAINT "memory_words_pool_id_word_pk" PRIMARY KEY("pool_id","word")
);
--> statement-breakpoint
ALTER TABLE "memory_captures" ADD CONSTRAINT "memory_captures_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "memory_item_history" ADD CONSTRAINT "memory_item_history_pool_id_memory_pools_id_fk" FOREIGN KEY ("pool_id") REFERENCES "public"."memory_pools"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "memory_items" ADD CONSTRAINT "memory_items_pool_id_memory_pools_id_fk" FOREIGN KEY ("pool_id") REFERENCES "public"."memory_pools"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "memory_pools" ADD CONSTRAINT "memory_pools_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "memory_recalls" ADD CONSTRAINT "memory_recalls_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "memory_settings" ADD CONSTRAINT "memory_settings_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "memory_words" ADD CONSTRAINT "memory_words_pool_id_memory_pools_id_fk" FOREIGN KEY ("pool_id") REFERENCES "public"."memory_pools"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "memory_captures_run_key" ON "memory_captures" USING btree ("org_id","run_id");--> statement-breakpoint
CREATE INDEX "memory_captures_due_idx" ON "memory_captures" USING btree ("next_attempt_at") WHERE "memory_captures"."state" = 'pending';--> statement-breakpoint
CREATE INDEX "memory_captures_org_newest_idx" ON "memory_captures" USING btree ("org_id","id" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "memory_item_history_item_idx" ON "memory_item_history" USING btree ("pool_id","item_id","id");--> statement-breakpoint
CREATE UNIQUE INDEX "memory_items_pool_content_key" ON "memory_items" USING btree ("pool_id","content_hash");--> statement-breakpoint
CREATE UNIQUE INDEX "memory_items_capture_fact_key" ON "memory_items" USING btree ("capture_id","fact_index");--> statement-breakpoint
CREATE INDEX "memory_items_pool_newest_idx" ON "memory_items" USING btree ("org_id","pool_id","id" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "memory_items_search_idx" ON "memory_items" USING gin ("search_vector");--> statement-breakpoint
CREATE UNIQUE INDEX "memory_pools_owner_key" ON "memory_pools" USING btree ("org_id","owner_key");--> statement-breakpoint
CREATE INDEX "memory_recalls_org_newest_idx" ON "memory_recalls" USING btree ("org_id","id" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "memory_recalls_run_idx" ON "memory_recalls" USING btree ("org_id","run_id","id" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "memory_recalls_root_idx" ON "memory_recalls" USING btree ("org_id","root_run_id","id" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "memory_words_trgm_idx" ON "memory_words" USING gin ("word" gin_trgm_ops);