CREATE TABLE "run_messages" (
	"run_id" text NOT NULL,
	"seq" integer NOT NULL,
	"org_id" text NOT NULL,
	"root_run_id" text NOT NULL,
	"role" text NOT NULL,
	"content" text NOT NULL,
	"tool_calls" jsonb,
	"tool_call_id" text,
	"name" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "run_messages_run_id_seq_pk" PRIMARY KEY("run_id","seq"),
	CONSTRAINT "run_messages_role_check" CHECK ("run_messages"."role" in ('user', 'assistant', 'tool'))
);
--> statement-breakpoint
ALTER TABLE "run_messages" ADD CONSTRAINT "run_messages_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "run_messages_thread_idx" ON "run_messages" USING btree ("org_id","root_run_id","run_id","seq");--> statement-breakpoint
-- runs finished before transcripts were kept: their prompt and answer, as later turns were given them
INSERT INTO "run_messages" ("run_id", "seq", "org_id", "root_run_id", "role", "content")
SELECT "id", 0, "org_id", "root_run_id", 'user', "prompt" FROM "runs" WHERE "status" = 'succeeded' AND "output" IS NOT NULL;--> statement-breakpoint
INSERT INTO "run_messages" ("run_id", "seq", "org_id", "root_run_id", "role", "content")
SELECT "id", 1, "org_id", "root_run_id", 'assistant', "output" FROM "runs" WHERE "status" = 'succeeded' AND "output" IS NOT NULL;
