// The wire types by name: aliases of the generated schema (src/schema.d.ts), so they cannot drift from the
// service's /openapi.json. Only what the service sends as stream events without a schema is written here.
import type { components } from "./schema.d.ts";

type Schemas = components["schemas"];

export type ApprovalDecided = Schemas["ApprovalDecided"];
export type CancelResult = Schemas["CancelResult"];
export type DeleteResult = Schemas["DeleteResult"];
export type EditResult = Schemas["EditResult"];
export type EgressPolicy = Schemas["EgressPolicy"];
export type ErrorResponse = Schemas["ErrorResponse"];
export type ExecBody = Schemas["ExecBody"];
export type ExecResult = Schemas["ExecResult"];
export type FileEdit = Schemas["FileEdit"];
export type FileEntry = Schemas["FileEntry"];
export type FileListing = Schemas["FileListing"];
export type GlobResult = Schemas["GlobResult"];
export type GrepResult = Schemas["GrepResult"];
export type Health = Schemas["Health"];
export type InstallResult = Schemas["InstallResult"];
export type Limits = Schemas["Limits"];
export type LimitsPatch = Schemas["LimitsPatch"];
export type OneShotBody = Schemas["OneShotBody"];
export type OneShotResult = Schemas["OneShotResult"];
export type PackageLock = Schemas["PackageLock"];
export type PackageRequest = Schemas["PackageRequest"];
export type PresignBody = Schemas["PresignBody"];
export type PresignResult = Schemas["PresignResult"];
export type PreviewLink = Schemas["PreviewLink"];
export type ProcessBody = Schemas["ProcessBody"];
export type ProcessInfo = Schemas["ProcessInfo"];
export type ProcessList = Schemas["ProcessList"];
export type ProcessOutput = Schemas["ProcessOutput"];
export type ProcessSignal = Schemas["ProcessSignal"];
export type ProcessStart = Schemas["ProcessStart"];
export type ProcessStdinResult = Schemas["ProcessStdinResult"];
export type ProfileList = Schemas["ProfileList"];
export type Readiness = Schemas["Readiness"];
export type SessionCreate = Schemas["SessionCreate"];
export type SessionForkResult = Schemas["SessionForkResult"];
export type SessionInfo = Schemas["SessionInfo"];
export type SessionList = Schemas["SessionList"];
export type SessionPatch = Schemas["SessionPatch"];
export type TemplateInfo = Schemas["TemplateInfo"];
export type TemplateList = Schemas["TemplateList"];
export type TextEdit = Schemas["TextEdit"];
export type ToolAnswer = Schemas["ToolAnswer"];
export type ToolAnswered = Schemas["ToolAnswered"];
export type ToolList = Schemas["ToolList"];
export type ToolSpec = Schemas["ToolSpec"];
export type UploadResult = Schemas["UploadResult"];
export type WriteResult = Schemas["WriteResult"];

export type Language = NonNullable<ExecBody["language"]>;
export type SignalName = ProcessSignal["signal"];
export type StreamName = ProcessOutput["stream"];

/** Output as it happened, from a streamed execution (the `stdout` and `stderr` events). */
export interface OutputChunk {
  stream: "stdout" | "stderr";
  text: string;
}

/** A guest's call of a caller-side tool (the `tool_call` event of an exec stream). */
export interface ToolCallEvent {
  call_id: string;
  tool: string;
  arguments: Record<string, unknown>;
}

/** A guest's call of a tool that needs approval (the `approval_required` event of an exec stream). */
export interface ApprovalEvent {
  approval_id: string;
  tool: string;
  arguments: Record<string, unknown>;
  timeout_s: number;
}

/** The last event of a process's output stream (`exit`): how the process ended. */
export interface ProcessExit {
  state: ProcessInfo["state"];
  exit_code?: number | null;
  error?: string | null;
}
