CREATE TABLE "slack_approval_messages" (
	"event_id" bigint PRIMARY KEY NOT NULL,
	"run_id" text NOT NULL,
	"org_id" text NOT NULL,
	"team_id" text NOT NULL,
	"channel" text NOT NULL,
	"thread_ts" text NOT NULL,
	"after_ts" text NOT NULL,
	"approval_ids" jsonb NOT NULL,
	"state" text DEFAULT 'pending' NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"uncertain" boolean DEFAULT false NOT NULL,
	"next_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
	"lease_expires_at" timestamp with time zone,
	"last_error" text,
	"message_ts" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"sent_at" timestamp with time zone,
	CONSTRAINT "slack_approval_messages_state_check" CHECK ("slack_approval_messages"."state" in ('pending', 'posting', 'sent', 'failed', 'skipped'))
);
--> statement-breakpoint
ALTER TABLE "slack_approval_messages" ADD CONSTRAINT "slack_approval_messages_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "slack_approval_messages" ADD CONSTRAINT "slack_approval_messages_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "slack_approval_messages_due_idx" ON "slack_approval_messages" USING btree ("next_attempt_at") WHERE state in ('pending', 'posting');--> statement-breakpoint
CREATE INDEX "slack_approval_messages_run_idx" ON "slack_approval_messages" USING btree ("run_id");