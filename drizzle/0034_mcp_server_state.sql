ALTER TABLE "mcp_servers" ADD COLUMN "failures" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "mcp_servers" ADD COLUMN "failing_since" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "mcp_servers" ADD COLUMN "next_check_at" timestamp with time zone;--> statement-breakpoint
CREATE INDEX "mcp_servers_next_check_idx" ON "mcp_servers" USING btree ("next_check_at");--> statement-breakpoint
UPDATE "mcp_servers" SET "failures" = 1, "failing_since" = "last_checked_at", "next_check_at" = now() WHERE NOT "ready" AND "last_error" IS NOT NULL;
