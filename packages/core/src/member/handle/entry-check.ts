import { type DecodedEntry, decodeEntry, type EntryFields } from '../../protocol/entry-format';
import { checkWithSchema, type SchemaCheck } from '../../protocol/standard-schema';
import type { ResolvedMemberOptions } from '../member-options';

export type DecodedPayload = Extract<DecodedEntry, { ok: true }>;

/**
 * An entry ready for its handler (decoded with the codec it names, and the member's `schema`
 * output as its payload), or why it never will be: `undecodable` (no `p`, bad headers, a codec
 * the member does not know, or one that failed) or `invalid` (the schema refused it). Neither
 * changes on a retry, so such an entry is dead-lettered at once.
 */
export type EntryCheck = { ok: true; decoded: DecodedPayload } | { ok: false; cause: 'undecodable' | 'invalid'; reason: string };

/**
 * Decodes an entry and validates its payload. Synchronous unless the schema is asynchronous (no
 * promise, no microtask on the hot path of JSON entries without a schema). Never throws.
 * Used alike for single entries, lanes and each entry of a batch.
 */
export function checkEntry(
  entry: EntryFields,
  options: Pick<ResolvedMemberOptions, 'codec' | 'codecs' | 'schema'>,
): EntryCheck | Promise<EntryCheck> {
  const decoded = decodeEntry(entry, options.codec, options.codecs);
  if (!decoded.ok) return { ok: false, cause: 'undecodable', reason: decoded.reason };
  const schema = options.schema;
  if (schema === undefined) return { ok: true, decoded };
  const validated = (check: SchemaCheck): EntryCheck =>
    check.ok ? { ok: true, decoded: { ...decoded, payload: check.value } } : { ok: false, cause: 'invalid', reason: check.reason };
  const check = checkWithSchema(schema, decoded.payload);
  return check instanceof Promise ? check.then(validated) : validated(check);
}
