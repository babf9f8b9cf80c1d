CREATE TABLE "providers" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"name" text NOT NULL,
	"base_url" text NOT NULL,
	"models" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"models_given" boolean DEFAULT false NOT NULL,
	"ready" boolean DEFAULT false NOT NULL,
	"last_checked_at" timestamp with time zone,
	"last_error" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"created_by" text
);
--> statement-breakpoint
ALTER TABLE "providers" ADD CONSTRAINT "providers_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "providers_org_name_idx" ON "providers" USING btree ("org_id","name");--> statement-breakpoint
CREATE INDEX "providers_org_idx" ON "providers" USING btree ("org_id","id");