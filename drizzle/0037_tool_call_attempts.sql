CREATE TABLE "tool_call_attempts" (
	"org_id" text NOT NULL,
	"run_id" text NOT NULL,
	"round" integer NOT NULL,
	"call_id" text NOT NULL,
	"approval_id" text,
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"ended_at" timestamp with time zone,
	"status" text,
	"content" text,
	CONSTRAINT "tool_call_attempts_run_id_round_call_id_pk" PRIMARY KEY("run_id","round","call_id")
);
--> statement-breakpoint
ALTER TABLE "tool_call_attempts" ADD CONSTRAINT "tool_call_attempts_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "tool_call_attempts_org_idx" ON "tool_call_attempts" USING btree ("org_id");