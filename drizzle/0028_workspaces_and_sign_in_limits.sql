CREATE TABLE "auth_rate_limits" (
	"key" text PRIMARY KEY NOT NULL,
	"points" integer DEFAULT 0 NOT NULL,
	"expire" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "thread_workspaces" (
	"org_id" text NOT NULL,
	"thread_id" text NOT NULL,
	"holder" text,
	"lease_expires_at" timestamp with time zone,
	"revision" integer DEFAULT 0 NOT NULL,
	"sha256" text,
	"bytes" bigint,
	"saved_at" timestamp with time zone,
	CONSTRAINT "thread_workspaces_org_id_thread_id_pk" PRIMARY KEY("org_id","thread_id")
);
--> statement-breakpoint
ALTER TABLE "thread_workspaces" ADD CONSTRAINT "thread_workspaces_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "auth_rate_limits_expire_idx" ON "auth_rate_limits" USING btree ("expire");--> statement-breakpoint
CREATE INDEX "thread_workspaces_holder_idx" ON "thread_workspaces" USING btree ("holder");--> statement-breakpoint
CREATE INDEX "thread_workspaces_blob_idx" ON "thread_workspaces" USING btree ("org_id","sha256");