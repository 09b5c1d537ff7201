import { describe, expect, it } from 'vitest';
import { splitCredentials } from './connection';
import { redactUrl, redactUrlList } from './redact';

describe('redactUrl: no password is ever printed', () => {
  const cases: [string, string][] = [
    ['redis://:secret@host:6390', 'redis://:***@host:6390'],
    ['redis://user:secret@host:6390/0', 'redis://user:***@host:6390/0'],
    ['redis://:S3cr@tPassw0rd@host', 'redis://:***@host'],
    ['rediss://u:pa:ss@host:6380', 'rediss://u:***@host:6380'],
    ['redis://u:pa/ss@host:6390', 'redis://u:***@host:6390'],
    ['redis://u:p@ss/w:rd@host:6390/2', 'redis://u:***@host:6390/2'],
    // "/x@y" cannot be told from a password holding "/": more is hidden, never less.
    ['redis://u:pw@host:6390/x@y', 'redis://u:***@y'],
    ['redis://onlypassword@host', 'redis://***@host'],
    ['redis://host:6390', 'redis://host:6390'],
    [':secret@host:6390', '***@host:6390'],
    ['cannot connect to Redis at redis://:p@ss/w@h:1: ECONNREFUSED', 'cannot connect to Redis at redis://:***@h:1: ECONNREFUSED'],
    ['got "redis://u:s3cr@t@host"', 'got "redis://u:***@host"'],
    ['at redis://:a@b@h1:1,redis://u:c/d@h2:2: down', 'at redis://:***@h1:1,redis://u:***@h2:2: down'],
  ];
  for (const [raw, shown] of cases) {
    it(`${raw} is shown as ${shown}`, () => {
      expect(redactUrl(raw)).toBe(shown);
    });
  }

  it('a token with an @ and no scheme is hidden up to its last @ wherever it stands in the text', () => {
    const cases: [string, string][] = [
      ['cannot connect to :S3cret@host:6390 (ECONNREFUSED)', 'cannot connect to ***@host:6390 (ECONNREFUSED)'],
      [
        "error: option '--url <url>' argument ':S3cret@host:6390' is invalid",
        "error: option '--url <url>' argument '***@host:6390' is invalid",
      ],
      ['at redis://h1:1 and :S3cret@h2:2', 'at redis://h1:1 and ***@h2:2'],
      ['got ":p@ss@h:1", then "u:x@h:2"', 'got "***@h:1", then "***@h:2"'],
      ["unknown option '--urll=:S3cr@t@h:1'", "unknown option '***@h:1'"],
      ['tab\t:pw@h:1\nnext line', 'tab\t***@h:1\nnext line'],
    ];
    for (const [raw, shown] of cases) expect(redactUrl(raw)).toBe(shown);
    for (const [raw] of cases) expect(redactUrl(raw)).not.toMatch(/S3cr|:pw|p@ss|u:x/);
  });

  it('a --cluster list: every item redacted alone', () => {
    expect(redactUrlList('redis://:a@b@h1:1,h2:2,redis://u:c/d@h3:3')).toBe('redis://:***@h1:1,h2:2,redis://u:***@h3:3');
  });
});

describe('splitCredentials: a password may hold @, : and /', () => {
  it('takes user and password out of the URL, up to its last @, decoding them', () => {
    expect(splitCredentials('redis://ops:Sec/ond:p@ss@h:2/1')).toEqual({
      bare: 'redis://h:2/1',
      username: 'ops',
      password: 'Sec/ond:p@ss',
    });
    expect(splitCredentials('redis://:p%40w@h:2')).toEqual({ bare: 'redis://h:2', password: 'p@w' });
    expect(splitCredentials('redis://h:2')).toEqual({ bare: 'redis://h:2' });
  });
});
