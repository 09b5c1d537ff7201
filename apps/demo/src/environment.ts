/**
 * An environment variable the demo reads, undefined when it is unset or empty: `PORT=` or
 * `DEMO_SHUTDOWN_TIMEOUT_MS=` left blank in an env file means "use the default", not 0. (The CLI
 * reads its variables the same way, packages/cli/src/environment.ts.)
 */
export function env(name: string): string | undefined {
  const value = process.env[name];
  return value === undefined || value.trim() === '' ? undefined : value;
}
