CREATE TABLE "chat_completions" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"engine" text NOT NULL,
	"model" text,
	"user_id" text,
	"status" text NOT NULL,
	"started_at" timestamp with time zone NOT NULL,
	"finished_at" timestamp with time zone NOT NULL,
	"input_tokens" integer,
	"output_tokens" integer
);
--> statement-breakpoint
ALTER TABLE "chat_completions" ADD CONSTRAINT "chat_completions_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "chat_completions_org_idx" ON "chat_completions" USING btree ("org_id","id");