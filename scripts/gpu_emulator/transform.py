#!/usr/bin/env python3
"""transform.py IN.cu OUT: rewrite CUDA source into C++ for the emulated GPU (cuda_runtime.h here).

  kernel<<<grid, block[, smem[, stream]]>>>(args)
      -> emu::launch("kernel", grid, block, smem, stream, <its __launch_bounds__ or 0>, kernel, args)
  extern __shared__ T x[];        -> T* x = (T*)emu::dyn_smem();
  __shared__ T a[..], b[..];      -> the same, then EMU_SHARED(a); EMU_SHARED(b);  (poisoned per block)
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {D}, {A}, {B}, {C};" : ... : ...)
      -> emu::mma_m16n8k16_bf16 (m16n8k8 tf32: emu::mma_m16n8k8_tf32) wired by the asm's own %N operand numbers, so the kernel's operand
         order is checked rather than assumed. Likewise ldmatrix.sync.aligned.m8n8.x4.shared.b16,
         cp.async.cg.shared.global (16 bytes), cp.async.commit_group and cp.async.wait_group.
         Any other inline asm is an error.
  reinterpret_cast<T*>(            -> emu::aligned_cast<T*>(   (a GPU faults on misaligned loads)
Line numbers are kept (#line), so errors, __syncthreads sites and backtraces name the .cu lines.
"""
import re
import sys

def fail(msg):
    raise SystemExit('transform.py: %s: %s' % (sys.argv[1], msg))


def closing(s, i):
    """Index of the bracket closing the one at s[i], skipping string literals."""
    depth, j = 0, i
    while j < len(s):
        if s[j] == '"':
            j += 1
            while s[j] != '"':
                j += 2 if s[j] == '\\' else 1
        elif s[j] in '([{':
            depth += 1
        elif s[j] in ')]}':
            depth -= 1
            if depth == 0:
                return j
        j += 1
    fail('unbalanced brackets')


def split_top(s, sep=','):
    """s split at `sep` outside brackets and string literals."""
    parts, depth, start, j = [], 0, 0, 0
    while j < len(s):
        if s[j] == '"':
            j = s.index('"', j + 1)
        elif s[j] in '([{':
            depth += 1
        elif s[j] in ')]}':
            depth -= 1
        elif s[j] == sep and depth == 0:
            parts.append(s[start:j])
            start = j + 1
        j += 1
    return parts + [s[start:]]


def parse_asm(asm):
    """(template, [(constraint, expression)] in operand-number order) of one asm statement's
    text from '(' to ')'."""
    sections = split_top(asm[1:-1], ':')
    template = ''.join(re.findall(r'"((?:[^"\\]|\\.)*)"', sections[0])).replace('\\n', ' ').replace('\\t', ' ')
    ops = []  # outputs, then inputs
    for sec in sections[1:3]:
        for p in split_top(sec):
            if p.strip():
                c = re.match(r'\s*"([^"]*)"\s*\((.*)\)\s*$', p, re.S)
                ops.append((c.group(1), c.group(2).strip()))
    return template, ops


def operands(template, ops, pattern, constraints):
    """The expressions of the %N in template, which must match pattern (its groups: the %N
    lists of each operand group, in order), each with a constraint from constraints[group]."""
    m = re.fullmatch(pattern, template.strip().rstrip(';').strip())
    if not m:
        fail('inline asm %r does not match %r' % (template, pattern))
    groups = []
    for g, allowed in zip(m.groups(), constraints):
        nums = [int(n) for n in re.findall(r'%(\d+)', g)]
        for n in nums:
            if ops[n][0] not in allowed:
                fail('asm operand %%%d of %r has constraint %r' % (n, template, ops[n][0]))
        groups.append([ops[n][1] for n in nums])
    return groups


def mma_call(template, ops):
    name = template.split()[0]
    D, A, B, C = operands(template, ops, re.escape(name) + r'\s+\{(.*?)\},\s*\{(.*?)\},\s*\{(.*?)\},\s*\{(.*?)\}',
                          [('=f', '+f'), ('r',), ('r',), ('f', '+f')])
    if [len(g) for g in (D, A, B, C)] != [4, 4, 2, 4]:
        fail('mma operand groups %r' % [D, A, B, C])
    arr = lambda exprs, t: ', '.join('(%s)(%s)' % (t, e) for e in exprs)
    return ('{ const uint32_t emu_a[4] = {%s}, emu_b[2] = {%s}; const float emu_c[4] = {%s}; float emu_d[4]; '
            'emu::%s(emu_d, emu_a, emu_b, emu_c, __LINE__); %s }' %
            (arr(A, 'uint32_t'), arr(B, 'uint32_t'), arr(C, 'float'), MMA[name],
             ' '.join('%s = emu_d[%d];' % (e, i) for i, e in enumerate(D))))


def ldmatrix_call(template, ops):
    R, addr = operands(template, ops, re.escape(LDMATRIX) + r'\s+\{(.*?)\},\s*\[(%\d+)\]', [('=r',), ('r',)])
    if len(R) != 4:
        fail('ldmatrix.x4 needs 4 registers, not %r' % R)
    return ('{ uint32_t emu_r[4]; emu::ldmatrix_x4(emu_r, (uint32_t)(%s), __LINE__); %s }' %
            (addr[0], ' '.join('%s = emu_r[%d];' % (e, i) for i, e in enumerate(R))))


def cp_async_call(template, ops):
    dst, src = operands(template, ops, re.escape(CP_ASYNC) + r'\s+\[(%\d+)\],\s*\[(%\d+)\],\s*16', [('r',), ('l',)])
    return 'emu::cp_async((uint32_t)(%s), (const void*)(%s), 16, __LINE__);' % (dst[0], src[0])


def wait_call(template, ops):
    n, = operands(template, ops, re.escape(WAIT) + r'\s+(%\d+)', [('n',)])
    return 'emu::cp_async_wait(%s);' % n[0]


MMA = {'mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32': 'mma_m16n8k16_bf16',
       'mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32': 'mma_m16n8k8_tf32'}
LDMATRIX = 'ldmatrix.sync.aligned.m8n8.x4.shared.b16'
CP_ASYNC = 'cp.async.cg.shared.global'
WAIT = 'cp.async.wait_group'
ASM = {**{name: mma_call for name in MMA}, LDMATRIX: ldmatrix_call, CP_ASYNC: cp_async_call, WAIT: wait_call,
       'cp.async.commit_group': lambda template, ops: 'emu::cp_async_commit();'}


def asm_call(asm):
    """The emulation call for one inline asm statement (its text from '(' to ')')."""
    template, ops = parse_asm(asm)
    words = template.split()
    if not words or words[0].rstrip(';') not in ASM:
        fail('unknown inline asm %r' % template)
    return ASM[words[0].rstrip(';')](template, ops)


src = open(sys.argv[1]).read()

bounds = {}  # kernel name -> its __launch_bounds__ expression
for m in re.finditer(r'__launch_bounds__\s*\(', src):
    e = closing(src, m.end() - 1)
    bounds[re.match(r'\s*(\w+)\s*\(', src[e + 1:]).group(1)] = split_top(src[m.end():e])[0].strip()

src = re.sub(r'extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w:]+)\s+(\w+)\s*\[\s*\]\s*;',
             r'\1* \2 = (\1*)emu::dyn_smem();', src)


def register_shared(m):
    decl = re.sub(r'^\s*__shared__\s+(__align__\(\d+\)\s+)?', '', m.group(0)[:-1])
    parts = split_top(decl)  # the first declarator follows the type, later ones a comma
    names = [re.search(r'(\w+)\s*\[', parts[0]).group(1)] + [re.match(r'\s*(\w+)', p).group(1) for p in parts[1:]]
    return m.group(0) + ''.join(' EMU_SHARED(%s);' % n for n in names)


src = re.sub(r'^[ \t]*__shared__\b[^;]*;', register_shared, src, flags=re.M)

out, i = [], 0
for m in re.finditer(r'\basm\s+(?:volatile\s*)?\(', src):
    e = closing(src, m.end() - 1)
    semi = src.index(';', e)
    out += [src[i:m.start()], asm_call(src[m.end() - 1:e + 1]), '\n' * src.count('\n', m.start(), semi)]
    i = semi + 1
src = ''.join(out) + src[i:]

src = re.sub(r'reinterpret_cast<(\s*(?:const\s+)?[\w:]+\s*\*)\s*>\(', r'emu::aligned_cast<\1>(', src)

out, i = [], 0
while (k := src.find('<<<', i)) >= 0:
    head = re.search(r'((?:\w+::)*(\w+)(?:<[^<>;()]*>)?)\s*$', src[i:k])
    e = src.index('>>>', k)
    cfg = [p.strip() for p in split_top(src[k + 3:e])]
    if not 2 <= len(cfg) <= 4:
        fail('launch configuration %r' % cfg)
    cfg += ['0'] * (4 - len(cfg))
    args = re.match(r'\s*\(\s*(\)?)', src[e + 3:])
    if not args:
        fail('a launch without an argument list')
    out += [src[i:i + head.start(1)],
            'emu::launch("%s", dim3(%s), dim3(%s), (size_t)(%s), (cudaStream_t)(%s), (unsigned)(%s), %s%s' %
            (head.group(1), cfg[0], cfg[1], cfg[2], cfg[3], bounds.get(head.group(2), '0'), head.group(1),
             ')' if args.group(1) else ', '),
            '\n' * src.count('\n', k, e + 3 + args.end())]
    i = e + 3 + args.end()
src = ''.join(out) + src[i:]

with open(sys.argv[2], 'w') as f:
    f.write('#line 1 "%s"\n%s' % (sys.argv[1], src))
