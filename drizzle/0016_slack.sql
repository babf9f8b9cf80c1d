CREATE TABLE "slack_events" (
	"team_id" text NOT NULL,
	"event_id" text NOT NULL,
	"org_id" text NOT NULL,
	"received_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "slack_events_team_id_event_id_pk" PRIMARY KEY("team_id","event_id")
);
--> statement-breakpoint
CREATE TABLE "slack_messages" (
	"team_id" text NOT NULL,
	"channel" text NOT NULL,
	"ts" text NOT NULL,
	"org_id" text NOT NULL,
	"run_id" text NOT NULL,
	"event_id" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "slack_messages_team_id_channel_ts_pk" PRIMARY KEY("team_id","channel","ts")
);
--> statement-breakpoint
CREATE TABLE "slack_replies" (
	"run_id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"team_id" text NOT NULL,
	"channel" text NOT NULL,
	"thread_ts" text NOT NULL,
	"message_ts" text NOT NULL,
	"state" text DEFAULT 'waiting' NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"uncertain" boolean DEFAULT false NOT NULL,
	"next_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
	"lease_expires_at" timestamp with time zone,
	"last_error" text,
	"reply_ts" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"sent_at" timestamp with time zone,
	CONSTRAINT "slack_replies_state_check" CHECK ("slack_replies"."state" in ('waiting', 'pending', 'posting', 'sent', 'failed'))
);
--> statement-breakpoint
CREATE TABLE "slack_teams" (
	"team_id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"bot_user_id" text,
	"bot_id" text,
	"connected_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "slack_threads" (
	"team_id" text NOT NULL,
	"channel" text NOT NULL,
	"thread_ts" text NOT NULL,
	"org_id" text NOT NULL,
	"root_run_id" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "slack_threads_team_id_channel_thread_ts_pk" PRIMARY KEY("team_id","channel","thread_ts")
);
--> statement-breakpoint
ALTER TABLE "slack_events" ADD CONSTRAINT "slack_events_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "slack_messages" ADD CONSTRAINT "slack_messages_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "slack_replies" ADD CONSTRAINT "slack_replies_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "slack_replies" ADD CONSTRAINT "slack_replies_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "slack_teams" ADD CONSTRAINT "slack_teams_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "slack_threads" ADD CONSTRAINT "slack_threads_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "slack_events_received_idx" ON "slack_events" USING btree ("received_at");--> statement-breakpoint
CREATE INDEX "slack_messages_created_idx" ON "slack_messages" USING btree ("created_at");--> statement-breakpoint
CREATE INDEX "slack_replies_due_idx" ON "slack_replies" USING btree ("next_attempt_at") WHERE state in ('pending', 'posting');--> statement-breakpoint
CREATE INDEX "slack_replies_waiting_idx" ON "slack_replies" USING btree ("created_at") WHERE state = 'waiting';--> statement-breakpoint
CREATE UNIQUE INDEX "slack_teams_org_idx" ON "slack_teams" USING btree ("org_id");