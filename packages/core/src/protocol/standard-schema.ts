/**
 * The Standard Schema interface (https://standardschema.dev, v1), which zod 4, valibot, ArkType and
 * others implement: copied as its authors recommend, so that core depends on none of them.
 */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly '~standard': {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => StandardSchemaResult<Output> | Promise<StandardSchemaResult<Output>>;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
  };
}

export type StandardSchemaResult<Output> =
  | { readonly value: Output; readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<StandardSchemaIssue> };

export interface StandardSchemaIssue {
  readonly message: string;
  readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined;
}

/** The payload type a schema produces. */
export type StandardSchemaOutput<S> = S extends StandardSchemaV1<unknown, infer O> ? O : never;

export type SchemaCheck = { ok: true; value: unknown } | { ok: false; reason: string };

/** Checks an option: an object with `~standard.validate`, or an error naming `field`. */
export function assertStandardSchema(value: unknown, field = 'schema'): StandardSchemaV1 {
  const standard = (value as StandardSchemaV1 | null | undefined)?.['~standard'];
  if (
    value === null ||
    (typeof value !== 'object' && typeof value !== 'function') ||
    typeof standard?.validate !== 'function' ||
    standard.version !== 1
  ) {
    throw new TypeError(
      `${field} must be a Standard Schema v1 (an object with "~standard".validate, as zod 4 and valibot schemas are), got ${value === null ? 'null' : typeof value}`,
    );
  }
  return value as StandardSchemaV1;
}

/**
 * Validates a payload. Synchronous when the schema is (no promise, no microtask on the hot path);
 * a schema that throws counts as a refusal naming the error.
 */
export function checkWithSchema(schema: StandardSchemaV1, payload: unknown): SchemaCheck | Promise<SchemaCheck> {
  let result: StandardSchemaResult<unknown> | Promise<StandardSchemaResult<unknown>>;
  try {
    result = schema['~standard'].validate(payload);
  } catch (error) {
    return { ok: false, reason: `the schema threw: ${(error as Error)?.message ?? String(error)}` };
  }
  if (result instanceof Promise)
    return result.then(toCheck, (error: unknown) => ({
      ok: false,
      reason: `the schema threw: ${(error as Error)?.message ?? String(error)}`,
    }));
  return toCheck(result);
}

function toCheck(result: StandardSchemaResult<unknown>): SchemaCheck {
  if (result.issues === undefined) return { ok: true, value: result.value };
  const issues = result.issues.map((issue) => {
    const path = (issue.path ?? []).map((part) => String(typeof part === 'object' && part !== null ? part.key : part)).join('.');
    return path === '' ? issue.message : `${path}: ${issue.message}`;
  });
  return { ok: false, reason: `the payload does not match the schema: ${issues.join('; ')}` };
}
