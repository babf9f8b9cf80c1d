CREATE TABLE "tool_approvals" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"run_id" text NOT NULL,
	"root_run_id" text NOT NULL,
	"call_id" text NOT NULL,
	"tool" text NOT NULL,
	"arguments" jsonb NOT NULL,
	"status" text DEFAULT 'pending' NOT NULL,
	"decided_by" text,
	"decided_at" timestamp with time zone,
	"expires_at" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "tool_approvals_status_check" CHECK ("tool_approvals"."status" in ('pending', 'approved', 'denied', 'cancelled', 'expired'))
);
--> statement-breakpoint
CREATE TABLE "tool_policies" (
	"org_id" text NOT NULL,
	"tool" text NOT NULL,
	"mode" text NOT NULL,
	"updated_by" text,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "tool_policies_org_id_tool_pk" PRIMARY KEY("org_id","tool"),
	CONSTRAINT "tool_policies_mode_check" CHECK ("tool_policies"."mode" in ('auto', 'approve'))
);
--> statement-breakpoint
ALTER TABLE "tool_approvals" ADD CONSTRAINT "tool_approvals_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "tool_policies" ADD CONSTRAINT "tool_policies_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "tool_approvals_run_idx" ON "tool_approvals" USING btree ("org_id","run_id","id");