import { createRequire } from 'node:module';

/**
 * Turns payloads into the stream field `p` and back. A text codec encodes to a string; a binary
 * codec (`binary: true`) to bytes, which are stored as they are and handed back to `decode` as a
 * Buffer. The codec's `name` is stored in each entry it wrote (field `c`; none means `json`), so a
 * member decodes every entry with the codec that wrote it, whatever its own default is.
 */
export type PayloadCodec = TextCodec | BinaryCodec;

export interface TextCodec {
  /** Stored with each entry: 1-64 characters of A-Z a-z 0-9 . _ - (`json` and `msgpack` are built in). */
  readonly name: string;
  readonly binary?: false;
  encode(payload: unknown): string;
  decode(raw: string): unknown;
}

export interface BinaryCodec {
  /** Stored with each entry: 1-64 characters of A-Z a-z 0-9 . _ - (`json` and `msgpack` are built in). */
  readonly name: string;
  /** `encode` returns bytes, stored as they are; `decode` gets them back as a Buffer. */
  readonly binary: true;
  encode(payload: unknown): Uint8Array;
  decode(raw: Buffer): unknown;
}

export const CODEC_NAME_PATTERN = /^[A-Za-z0-9._-]{1,64}$/;

export const jsonCodec: TextCodec = {
  name: 'json',
  encode: (payload) => {
    const encoded = JSON.stringify(payload);
    if (encoded === undefined) throw new TypeError(`payload of type ${typeof payload} cannot be encoded as JSON`);
    return encoded;
  },
  decode: (raw) => JSON.parse(raw),
};

type Msgpackr = { pack(value: unknown): Buffer; unpack(bytes: Buffer | Uint8Array): unknown };
let msgpackr: Msgpackr | undefined;
function loadMsgpackr(): Msgpackr {
  if (msgpackr) return msgpackr;
  try {
    msgpackr = createRequire(__filename)('msgpackr') as Msgpackr;
  } catch (error) {
    throw new Error(`the msgpack codec needs the msgpackr package (npm install msgpackr): ${(error as Error).message}`);
  }
  return msgpackr;
}

/**
 * MessagePack through `msgpackr` (an optional peer dependency: install it where msgpack is used,
 * producers and consumers alike). Binary: Buffers and typed arrays inside a payload arrive as
 * they were sent, as do Dates, Maps, Sets and BigInts, and payloads are smaller and faster to
 * decode than JSON.
 *
 * @example
 * const producer = new StreamProducer(redis, { streamPrefix: 'images', codec: msgpackCodec });
 * await producer.send({ key: 'img-1', payload: { name: 'a.png', bytes: await readFile('a.png') } });
 */
export const msgpackCodec: BinaryCodec = {
  name: 'msgpack',
  binary: true,
  encode: (payload) => loadMsgpackr().pack(payload),
  decode: (raw) => loadMsgpackr().unpack(raw),
};

/** The built-in codecs, by name. */
export const BUILT_IN_CODECS: ReadonlyMap<string, PayloadCodec> = new Map([jsonCodec, msgpackCodec].map((codec) => [codec.name, codec]));

/** Checks a codec option; `field` names it in the error. */
export function assertCodec(codec: unknown, field = 'codec'): PayloadCodec {
  const c = codec as PayloadCodec | null | undefined;
  if (c === null || typeof c !== 'object' || typeof c.encode !== 'function' || typeof c.decode !== 'function') {
    throw new TypeError(`${field} must have a name and encode(payload) and decode(raw) functions`);
  }
  if (typeof c.name !== 'string' || !CODEC_NAME_PATTERN.test(c.name)) {
    throw new RangeError(`${field}.name must be 1-64 characters of A-Z a-z 0-9 . _ -, got ${JSON.stringify(c.name)}`);
  }
  return c;
}

/**
 * The codecs a member decodes with, by name: the built-in ones, then `codecs`, then its own `codec`
 * (a later one of the same name wins, so a custom codec may replace a built-in).
 */
export function codecRegistry(codec: PayloadCodec, codecs: readonly PayloadCodec[] = []): ReadonlyMap<string, PayloadCodec> {
  const registry = new Map(BUILT_IN_CODECS);
  for (const extra of codecs) registry.set(extra.name, extra);
  registry.set(codec.name, codec);
  return registry;
}
