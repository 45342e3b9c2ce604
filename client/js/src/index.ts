/** The ctxd client for Node (ESM): see README.md, "TypeScript". */
export * from "./client.js";
export * from "./errors.js";
export * from "./types.js";
export { encode, decode, Float64, CodecError, MAX_DEPTH } from "./codec.js";
export type { Value } from "./codec.js";
export { CodeInterpreter } from "./daytona.js";
export type { RunCodeOptions, ExecutionResult, ExecutionError, OutputMessage, InterpreterContext } from "./daytona.js";
