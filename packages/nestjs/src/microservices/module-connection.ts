import type { CoordinatorConnection } from '../coordinator-connection';

/** The connection a transport module names, or an error saying which `CoordinatorModule.forRoot` is missing. */
export function connectionOrThrow(
  connection: CoordinatorConnection | undefined,
  name: string | undefined,
  where: string,
): CoordinatorConnection {
  if (connection) return connection;
  throw new Error(
    name === undefined
      ? `${where}: no unnamed CoordinatorModule.forRoot in the application: import CoordinatorModule.forRoot({ redis: { url } }) (or name a connection with connection: "<name>")`
      : `${where}: connection "${name}" is not the name of any CoordinatorModule.forRoot: import CoordinatorModule.forRoot({ name: "${name}", redis: { url } })`,
  );
}
