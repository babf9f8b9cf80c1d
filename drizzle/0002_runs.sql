CREATE TABLE "idempotency_keys" (
	"org_id" text NOT NULL,
	"route" text NOT NULL,
	"key" text NOT NULL,
	"fingerprint" text NOT NULL,
	"state" text NOT NULL,
	"lock_token" text,
	"locked_until" timestamp with time zone,
	"response_status" integer,
	"response_type" text,
	"response_body" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	CONSTRAINT "idempotency_keys_org_id_route_key_pk" PRIMARY KEY("org_id","route","key")
);
--> statement-breakpoint
CREATE TABLE "run_events" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"run_id" text NOT NULL,
	"root_run_id" text NOT NULL,
	"type" text NOT NULL,
	"data" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "runs" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"root_run_id" text NOT NULL,
	"parent_run_id" text,
	"engine" text NOT NULL,
	"model" text,
	"prompt" text NOT NULL,
	"status" text DEFAULT 'queued' NOT NULL,
	"origin" text NOT NULL,
	"error" text,
	"metadata" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"user_id" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"started_at" timestamp with time zone,
	"finished_at" timestamp with time zone,
	"lease_owner" text,
	"lease_expires_at" timestamp with time zone,
	"cancel_requested" boolean DEFAULT false NOT NULL,
	CONSTRAINT "runs_status_check" CHECK ("runs"."status" in ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
	CONSTRAINT "runs_origin_check" CHECK ("runs"."origin" in ('web', 'api', 'dev', 'skill', 'automation', 'chatplatform'))
);
--> statement-breakpoint
ALTER TABLE "runs" ADD CONSTRAINT "runs_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "idempotency_keys_expires_idx" ON "idempotency_keys" USING btree ("expires_at");--> statement-breakpoint
CREATE INDEX "run_events_org_idx" ON "run_events" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "run_events_run_idx" ON "run_events" USING btree ("run_id","id");--> statement-breakpoint
CREATE INDEX "run_events_root_idx" ON "run_events" USING btree ("root_run_id","id");--> statement-breakpoint
CREATE INDEX "run_events_created_idx" ON "run_events" USING btree ("created_at");--> statement-breakpoint
CREATE INDEX "runs_org_id_idx" ON "runs" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "runs_org_root_idx" ON "runs" USING btree ("org_id","root_run_id","id");--> statement-breakpoint
CREATE INDEX "runs_queued_idx" ON "runs" USING btree ("created_at") WHERE status = 'queued';--> statement-breakpoint
CREATE INDEX "runs_running_lease_idx" ON "runs" USING btree ("lease_expires_at") WHERE status = 'running';