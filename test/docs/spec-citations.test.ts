import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { findRoot } from '../support/repo-root';

// docs/spec.md is the specification the tree cites as "SPEC 5", "SPEC 9.4", "SPEC section 3".
// A citation is only worth something if a reader can follow it: this file fails when one names a
// heading docs/spec.md does not have. No Redis; it reads files.

const ROOT = findRoot(__dirname);
const SPEC_FILE = path.join(ROOT, 'docs/spec.md');
const SELF = path.relative(ROOT, __filename);

/** Where citations live: sources, tests, benchmarks, scripts, docs, and the README. */
const SCANNED_DIRS = ['packages', 'apps', 'bench', 'test', 'scripts', 'docs', '.ci'];
const SCANNED_ROOT_FILES = /^(README\.md|.*\.mts)$/;
const SKIPPED_DIRS = new Set(['node_modules', 'dist', '.git', 'coverage']);
const TEXT_FILES = /\.(ts|tsx|mts|cts|js|mjs|cjs|lua|md|json|html|css|ya?ml|sh|txt)$|^run$/;

interface TextFile {
  /** Relative to the repository root, with forward slashes. */
  file: string;
  text: string;
}

function textFiles(): TextFile[] {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      if (entry.isDirectory()) {
        if (!SKIPPED_DIRS.has(entry.name)) walk(path.join(dir, entry.name));
      } else if (entry.isFile() && TEXT_FILES.test(entry.name)) {
        files.push(path.join(dir, entry.name));
      }
    }
  };
  for (const dir of SCANNED_DIRS) if (fs.existsSync(path.join(ROOT, dir))) walk(path.join(ROOT, dir));
  for (const entry of fs.readdirSync(ROOT, { withFileTypes: true })) {
    if (entry.isFile() && SCANNED_ROOT_FILES.test(entry.name)) files.push(path.join(ROOT, entry.name));
  }
  return files
    .map((file) => path.relative(ROOT, file).split(path.sep).join('/'))
    .filter((file) => file !== SELF.split(path.sep).join('/'))
    .sort()
    .map((file) => ({ file, text: fs.readFileSync(path.join(ROOT, file), 'utf8') }));
}

function lineOf(text: string, index: number): number {
  let line = 1;
  for (let i = text.indexOf('\n'); i !== -1 && i < index; i = text.indexOf('\n', i + 1)) line += 1;
  return line;
}

// What may stand between "SPEC" and its number: spaces, line breaks, and the comment markers a
// citation split over two comment lines picks up ("SPEC\n * section 3", "SPEC\n-- 9.1").
const GAP = String.raw`(?:\s|\*|//+|--)*`;
const NUMBER = String.raw`\d+(?:\.\d+)?`;
const LIST_SEPARATOR = String.raw`[ \t]*(?:,|&|and|or|to|-|–)[ \t]*`;
const CITATION = new RegExp(String.raw`\b(?:SPEC|Spec)\b${GAP}(?:(?:sections?|§)${GAP})?(${NUMBER}(?:${LIST_SEPARATOR}${NUMBER})*)`, 'g');

/**
 * The section numbers a citation list names: "2.3" → [2.3]; "1, 5 and 9" → [1, 5, 9]; "3-5" and
 * "2–4" are ranges of whole sections ("9.1-9.3" of subsections of one section).
 */
function citedNumbers(list: string): string[] {
  const numbers: string[] = [];
  const parts = list.split(/[ \t]*(,|&|and|or|to|-|–)[ \t]*/);
  for (let i = 0; i < parts.length; i += 2) {
    const value = parts[i];
    const separator = i > 0 ? parts[i - 1] : undefined;
    const previous = numbers.at(-1);
    if (previous !== undefined && (separator === '-' || separator === '–' || separator === 'to')) {
      const [fromMajor, fromMinor] = previous.split('.').map(Number);
      const [toMajor, toMinor] = value.split('.').map(Number);
      if (fromMinor === undefined && toMinor === undefined) {
        for (let n = fromMajor + 1; n < toMajor; n++) numbers.push(String(n));
      } else if (fromMajor === toMajor && fromMinor !== undefined && toMinor !== undefined) {
        for (let n = fromMinor + 1; n < toMinor; n++) numbers.push(`${fromMajor}.${n}`);
      }
    }
    numbers.push(value);
  }
  return numbers;
}

interface Citation {
  file: string;
  line: number;
  /** As written, with its line breaks folded. */
  written: string;
  section: string;
}

function citationsIn(file: string, text: string): Citation[] {
  const found: Citation[] = [];
  for (const match of text.matchAll(CITATION)) {
    const written = match[0].replace(/\s+/g, ' ');
    for (const section of citedNumbers(match[1])) found.push({ file, line: lineOf(text, match.index), written, section });
  }
  return found;
}

/** The numbers of docs/spec.md's headings: "## 9. Rules …" → "9", "### 9.4 One live …" → "9.4". */
function specHeadings(markdown: string): string[] {
  return [...markdown.matchAll(/^#{2,6}[ \t]+(\d+(?:\.\d+)?)\.?[ \t]/gm)].map((m) => m[1]);
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

// The word issue (or issues, any case) followed by a number, after spaces or a hyphen, with or
// without "#" (the samples in the test below): a tracker number means nothing to a reader without
// the tracker. Not a match: an address such as ".../issues/123"
// (another project's tracker, which a reader can open), nor a line quoting one (github.com, owner/repo#n).
const ISSUE_CITATION = /\bissues?(?:[ \t]*-[ \t]*|[ \t]+)#?\d+/gi;
const ANOTHER_PROJECTS_ISSUE = /github\.com\/|\b[\w.-]+\/[\w.-]+#\d+/;
const CHANGELOG = /(^|\/)(CHANGELOG|HISTORY|CHANGES)[^/]*$/i;

interface IssueCitation {
  file: string;
  line: number;
  /** The line it is on, trimmed. */
  context: string;
}

function issueCitationsIn(file: string, text: string): IssueCitation[] {
  if (CHANGELOG.test(file)) return [];
  const lines = text.split('\n');
  const found: IssueCitation[] = [];
  for (const match of text.matchAll(ISSUE_CITATION)) {
    const line = lineOf(text, match.index);
    const context = lines[line - 1].trim();
    if (!ANOTHER_PROJECTS_ISSUE.test(context)) found.push({ file, line, context });
  }
  return found;
}

describe('docs/spec.md, the specification the tree cites', () => {
  const spec = fs.readFileSync(SPEC_FILE, 'utf8');
  const headings = specHeadings(spec);

  it('reads every form of citation the tree uses', () => {
    const numbers = (text: string) => citationsIn('x', text).map((c) => c.section);
    expect(numbers('(SPEC 9.4)')).toEqual(['9.4']);
    expect(numbers('SPEC 5, the client side')).toEqual(['5']);
    expect(numbers('SPEC section 4.')).toEqual(['4']);
    expect(numbers('SPEC §9.3')).toEqual(['9.3']);
    expect(numbers('Redis (SPEC\n * section 3). When')).toEqual(['3']);
    expect(numbers('fenced\n  -- (SPEC\n  -- 9.1: a lease')).toEqual(['9.1']);
    expect(numbers('// SPEC\n// 5 order')).toEqual(['5']);
    expect(numbers('SPEC sections 1, 5 and 9')).toEqual(['1', '5', '9']);
    expect(numbers('SPEC sections 3-5')).toEqual(['3', '4', '5']);
    expect(numbers('SPEC sections 2–4 and 7')).toEqual(['2', '3', '4', '7']);
    expect(numbers('SPEC 2.3, 5)')).toEqual(['2.3', '5']);
    expect(numbers("SPEC 2.3's invariants")).toEqual(['2.3']);
    expect(numbers('keep the SPEC invariants; spec.ts 5; SPEC.md 9')).toEqual([]);
    expect(citationsIn('x', 'a\nb (SPEC\n * section 3)')[0].line).toBe(2);
  });

  it('numbers its headings as the citations expect: sections 1 to 10, each subsection under its section', () => {
    expect(new Set(headings).size, `duplicate heading numbers: ${headings.join(' ')}`).toBe(headings.length);
    const sections = headings.filter((h) => !h.includes('.'));
    expect(sections).toEqual(['1', '2', '3', '4', '5', '6', '7', '8', '9', '10']);
    let current = '';
    for (const heading of headings) {
      if (!heading.includes('.')) current = heading;
      else expect(heading.split('.')[0], `${heading} sits under section ${current}`).toBe(current);
    }
    for (const required of ['2.1', '2.5', '9.1', '9.6', '10.1', '10.8']) expect(headings).toContain(required);
  });

  it('has a heading for every SPEC citation in code, tests, scripts and docs', () => {
    const known = new Set(headings);
    const citations = textFiles().flatMap(({ file, text }) => citationsIn(file, text));
    // The tree cites the spec about a hundred times; finding none would mean the scan is broken.
    expect(citations.length).toBeGreaterThan(50);
    const unresolved = citations.filter((c) => !known.has(c.section));
    expect(
      unresolved.map((c) => `${c.file}:${c.line}  "${c.written}" names SPEC ${c.section}, which docs/spec.md has no heading for`),
    ).toEqual([]);
  });

  it('links only pages and headings that exist', () => {
    const broken: string[] = [];
    for (const [, target] of spec.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/i.test(target)) continue;
      const [page, anchor] = target.split('#');
      const file = page === '' ? SPEC_FILE : path.resolve(path.dirname(SPEC_FILE), page);
      if (!fs.existsSync(file)) {
        broken.push(`${target}: no such file`);
        continue;
      }
      if (anchor === undefined) continue;
      const anchors = [...fs.readFileSync(file, 'utf8').matchAll(/^#{1,6}[ \t]+(.+)$/gm)].map((m) => anchorOf(m[1]));
      if (!anchors.includes(anchor)) broken.push(`${target}: no heading with that anchor`);
    }
    expect(broken).toEqual([]);
  });

  // Issue numbers of this project's tracker stand in for a reason a reader cannot look up: write what
  // they stand for instead (the reason itself, a SPEC heading, a docs section, a test, a commit hash).
  it('cites no issue numbers: the reason itself, or where it is written down', () => {
    // The samples are assembled, so that this file does not itself cite what it forbids.
    const [issue, Issue, issues] = ['issue', 'Issue', 'issues'];
    expect(issueCitationsIn('x', `${issue} 11 #7; ${Issue} 15: ; ${issues} 9 and 12; (${issue} #12); the ${issue}-11 fixes`)).toHaveLength(
      5,
    );
    expect(issueCitationsIn('x', `see https://github.com/redis/ioredis/issues/123 and redis/ioredis#1234 (${issue} 7)`)).toEqual([]);
    expect(issueCitationsIn('CHANGELOG.md', `${issue} 3`)).toEqual([]);
    const found = textFiles().flatMap(({ file, text }) => issueCitationsIn(file, text));
    expect(found.map((c) => `${c.file}:${c.line}  ${c.context}`)).toEqual([]);
  });
});
