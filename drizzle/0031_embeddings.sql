CREATE TABLE "embedding_settings" (
	"org_id" text PRIMARY KEY NOT NULL,
	"model" text NOT NULL,
	"provider_id" text,
	"dimensions" integer NOT NULL,
	"updated_by" text,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "embeddings" (
	"org_id" text NOT NULL,
	"kind" text NOT NULL,
	"item_id" text NOT NULL,
	"pool_id" text NOT NULL,
	"text_hash" text NOT NULL,
	"state" text DEFAULT 'pending' NOT NULL,
	"model" text,
	"dimensions" integer,
	"attempts" integer DEFAULT 0 NOT NULL,
	"last_error" text,
	"next_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
	"lease_owner" text,
	"lease_expires_at" timestamp with time zone,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "embeddings_kind_item_id_pk" PRIMARY KEY("kind","item_id"),
	CONSTRAINT "embeddings_kind_check" CHECK ("embeddings"."kind" in ('memory', 'record', 'chunk')),
	CONSTRAINT "embeddings_state_check" CHECK ("embeddings"."state" in ('pending', 'ready', 'failed'))
);
--> statement-breakpoint
ALTER TABLE "memory_recalls" ADD COLUMN "mode" text DEFAULT 'fulltext' NOT NULL;--> statement-breakpoint
ALTER TABLE "embedding_settings" ADD CONSTRAINT "embedding_settings_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "embeddings" ADD CONSTRAINT "embeddings_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "embeddings_due_idx" ON "embeddings" USING btree ("next_attempt_at") WHERE state = 'pending';--> statement-breakpoint
CREATE INDEX "embeddings_pool_idx" ON "embeddings" USING btree ("org_id","pool_id","kind");