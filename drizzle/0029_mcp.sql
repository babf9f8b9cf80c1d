CREATE TABLE "mcp_servers" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"name" text NOT NULL,
	"url" text NOT NULL,
	"header_names" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"ready" boolean DEFAULT false NOT NULL,
	"last_error" text,
	"tools" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"last_checked_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"created_by" text,
	CONSTRAINT "mcp_servers_name_check" CHECK ("mcp_servers"."name" ~ '^[a-z0-9_-]{1,32}$')
);
--> statement-breakpoint
CREATE TABLE "mcp_sessions" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"principal" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"last_used_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "runs" DROP CONSTRAINT "runs_origin_check";--> statement-breakpoint
ALTER TABLE "mcp_servers" ADD CONSTRAINT "mcp_servers_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "mcp_sessions" ADD CONSTRAINT "mcp_sessions_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "mcp_servers_org_name_idx" ON "mcp_servers" USING btree ("org_id","name");--> statement-breakpoint
CREATE INDEX "mcp_servers_org_idx" ON "mcp_servers" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "mcp_sessions_used_idx" ON "mcp_sessions" USING btree ("last_used_at");--> statement-breakpoint
ALTER TABLE "runs" ADD CONSTRAINT "runs_origin_check" CHECK ("runs"."origin" in ('web', 'api', 'dev', 'skill', 'automation', 'chatplatform', 'mcp'));