//! The assembler: the rules as a classic BPF program, with labels resolved into the forward
//! jumps classic BPF allows, and the program shaped for the kernel's constant-action cache
//! (only the architecture and the syscall number are loaded until a denied syscall matches).
//!
//! The syscalls' blocks are reached by a binary search on the number rather than one after
//! another. When a filter is installed the kernel runs it once for every syscall number, to
//! fill that cache, and it runs it again at every call the cache cannot answer (a syscall with
//! an argument test, such as `openat`, `ioctl`, `clone` or `socket`); a chain of one test per
//! syscall made both as long as the chain. Installing the bwrap stub's observed filter took
//! 149 µs as a chain and 101 µs as a search (medians of 1,000 alternating installs, each in a
//! fresh forked process). The search reaches any number in a few comparisons
//! (`shims/tests/seccomp.rs` bounds them) and uses conditional jumps alone while every subtree
//! is within their 255-instruction reach, unconditional ones beyond.

use super::rules::{Rule, Test};
use super::table::X32_SYSCALL_BIT;
use super::{Action, Arch, Instruction, MAX_INSTRUCTIONS, SeccompError};

// Classic BPF opcodes (include/uapi/linux/bpf_common.h).
pub(super) const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
pub(super) const ALU_AND_K: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
pub(super) const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
pub(super) const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
pub(super) const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
pub(super) const RET_K: u16 = 0x06; // BPF_RET | BPF_K
pub(super) const JA: u16 = 0x05; // BPF_JMP | BPF_JA: `k` is a forward offset of 32 bits

// `struct seccomp_data` offsets: `int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6];`
pub(super) const NR_OFFSET: u32 = 0;
pub(super) const ARCH_OFFSET: u32 = 4;
/// The low half of `args[i]`: both supported ABIs are little-endian.
pub(super) const fn arg_low_offset(arg: u8) -> u32 {
    16 + 8 * arg as u32
}

#[derive(Clone, Copy)]
pub(super) enum Target {
    Next,
    Label(usize),
}

#[derive(Clone)]
pub(super) enum Op {
    Stmt {
        code: u16,
        k: u32,
    },
    Jump {
        code: u16,
        k: u32,
        jt: Target,
        jf: Target,
    },
    /// An unconditional jump to a label: any distance forward, where the conditional jumps'
    /// offsets stop at 255.
    Always(usize),
    Bind(usize),
}

#[derive(Clone, Default)]
pub(super) struct Asm {
    pub(super) ops: Vec<Op>,
    pub(super) labels: usize,
}

impl Asm {
    pub(super) fn label(&mut self) -> usize {
        self.labels += 1;
        self.labels - 1
    }
    pub(super) fn bind(&mut self, label: usize) {
        self.ops.push(Op::Bind(label));
    }
    pub(super) fn load(&mut self, offset: u32) {
        self.ops.push(Op::Stmt {
            code: LD_W_ABS,
            k: offset,
        });
    }
    pub(super) fn and(&mut self, mask: u32) {
        self.ops.push(Op::Stmt {
            code: ALU_AND_K,
            k: mask,
        });
    }
    pub(super) fn ret(&mut self, action: Action) {
        self.ops.push(Op::Stmt {
            code: RET_K,
            k: action.to_ret(),
        });
    }
    pub(super) fn jump(&mut self, code: u16, k: u32, jt: Target, jf: Target) {
        self.ops.push(Op::Jump { code, k, jt, jf });
    }
    pub(super) fn always(&mut self, label: usize) {
        self.ops.push(Op::Always(label));
    }

    /// Resolves labels into relative offsets; every jump must land on an instruction at most
    /// 255 ahead (classic BPF jumps only forward).
    pub(super) fn finish(self) -> Result<Vec<Instruction>, SeccompError> {
        let mut positions = vec![None; self.labels];
        let mut pc = 0usize;
        for op in &self.ops {
            match op {
                Op::Bind(label) => {
                    if let Some(slot) = positions.get_mut(*label) {
                        *slot = Some(pc);
                    }
                }
                Op::Stmt { .. } | Op::Jump { .. } | Op::Always(_) => pc += 1,
            }
        }
        let total = pc;
        let mut out = Vec::with_capacity(total);
        for op in self.ops {
            let at = out.len();
            let offset = |target: Target| -> Result<u8, SeccompError> {
                let to = match target {
                    Target::Next => Some(at + 1),
                    Target::Label(label) => positions.get(label).copied().flatten(),
                };
                to.filter(|&to| to < total)
                    .and_then(|to| u8::try_from(to - (at + 1)).ok())
                    .ok_or(SeccompError::JumpOutOfRange { at })
            };
            match op {
                Op::Bind(_) => {}
                Op::Stmt { code, k } => out.push(Instruction {
                    code,
                    jt: 0,
                    jf: 0,
                    k,
                }),
                Op::Jump { code, k, jt, jf } => {
                    out.push(Instruction {
                        code,
                        jt: offset(jt)?,
                        jf: offset(jf)?,
                        k,
                    });
                }
                Op::Always(label) => {
                    let k = positions
                        .get(label)
                        .copied()
                        .flatten()
                        .filter(|&to| to < total && to > at)
                        .and_then(|to| u32::try_from(to - (at + 1)).ok())
                        .ok_or(SeccompError::JumpOutOfRange { at })?;
                    out.push(Instruction {
                        code: JA,
                        jt: 0,
                        jf: 0,
                        k,
                    });
                }
            }
        }
        if out.len() > MAX_INSTRUCTIONS {
            return Err(SeccompError::TooLong { len: out.len() });
        }
        Ok(out)
    }
}

/// Emits code that falls through when `test` holds and jumps to `fail` when it does not.
pub(super) fn emit_test(asm: &mut Asm, test: &Test, fail: usize) {
    let (arg, mask) = match *test {
        Test::AnyBit { arg, .. } => (arg, u32::MAX),
        Test::In { arg, mask, .. } | Test::NotIn { arg, mask, .. } => (arg, mask),
    };
    asm.load(arg_low_offset(arg));
    if mask != u32::MAX {
        asm.and(mask);
    }
    match *test {
        Test::AnyBit { mask, .. } => asm.jump(JSET_K, mask, Target::Next, Target::Label(fail)),
        Test::In { values, .. } => {
            let hit = asm.label();
            match values.split_last() {
                Some(((last, _), rest)) => {
                    for (value, _) in rest {
                        asm.jump(JEQ_K, *value, Target::Label(hit), Target::Next);
                    }
                    asm.jump(JEQ_K, *last, Target::Next, Target::Label(fail));
                }
                // Nothing is in the empty set: `A & 0` is never set, so always fail.
                None => asm.jump(JSET_K, 0, Target::Next, Target::Label(fail)),
            }
            asm.bind(hit);
        }
        Test::NotIn { values, .. } => {
            for (value, _) in values {
                asm.jump(JEQ_K, *value, Target::Label(fail), Target::Next);
            }
        }
    }
}

pub(super) fn assemble(arch: Arch, rules: &[Rule]) -> Result<Vec<Instruction>, SeccompError> {
    let mut asm = Asm::default();

    // Another ABI (i386 `int 0x80` on x86_64, aarch32 on aarch64) has other syscall numbers:
    // kill rather than check them against the wrong table.
    let arch_ok = asm.label();
    asm.load(ARCH_OFFSET);
    asm.jump(
        JEQ_K,
        arch.audit_arch(),
        Target::Label(arch_ok),
        Target::Next,
    );
    asm.ret(Action::KillProcess);
    asm.bind(arch_ok);
    asm.load(NR_OFFSET);

    // x32 shares AUDIT_ARCH_X86_64 but sets bit 30 of the number: deny it wholesale.
    if arch == Arch::X86_64 {
        let native_abi = asm.label();
        asm.jump(
            JGE_K,
            X32_SYSCALL_BIT,
            Target::Next,
            Target::Label(native_abi),
        );
        asm.ret(Action::EPERM);
        asm.bind(native_abi);
    }

    // One block per syscall: its rules in order; a block always returns. A number two
    // syscalls share keeps the first one's block, as a chain of them in order would.
    let mut groups: Vec<(u32, &'static str, Vec<&Rule>)> = Vec::new();
    for rule in rules {
        let Some(number) = rule.syscall.number(arch) else {
            continue;
        };
        match groups.iter_mut().find(|(n, _, _)| *n == number) {
            Some((_, name, members)) => {
                if *name == rule.syscall.name {
                    members.push(rule);
                }
            }
            None => groups.push((number, rule.syscall.name, vec![rule])),
        }
    }
    groups.sort_by_key(|(number, _, _)| *number);
    let blocks: Vec<(u32, Vec<&Rule>)> = groups
        .into_iter()
        .map(|(number, _, members)| (number, members))
        .collect();
    // The accumulator holds the syscall number until a block matches. A search whose
    // subtrees all fit a conditional jump's reach needs no unconditional jumps (fewer
    // instructions for the kernel to check and compile); a larger one takes them.
    let mut near = asm.clone();
    emit_search(&mut near, &blocks, false);
    match near.finish() {
        Err(SeccompError::JumpOutOfRange { .. }) => {
            emit_search(&mut asm, &blocks, true);
            asm.finish()
        }
        finished => finished,
    }
}

/// At most this many blocks are tested one after another at a leaf of the search.
const LEAF_BLOCKS: usize = 4;

/// A binary search over `blocks` (sorted by number, the number in the accumulator): a number
/// at or above the middle block's goes right (with `far`, by an unconditional jump, which no
/// subtree's size can put out of range); a leaf tests its few numbers in turn and allows any
/// other.
fn emit_search(asm: &mut Asm, blocks: &[(u32, Vec<&Rule>)], far: bool) {
    if blocks.len() <= LEAF_BLOCKS {
        for (number, members) in blocks {
            let next_syscall = asm.label();
            asm.jump(JEQ_K, *number, Target::Next, Target::Label(next_syscall));
            emit_block(asm, members);
            asm.bind(next_syscall);
        }
        asm.ret(Action::Allow);
        return;
    }
    let (below, from_middle) = blocks.split_at(blocks.len() / 2);
    let Some((middle, _)) = from_middle.first() else {
        return;
    };
    let right = asm.label();
    if far {
        let left = asm.label();
        asm.jump(JGE_K, *middle, Target::Next, Target::Label(left));
        asm.always(right);
        asm.bind(left);
    } else {
        asm.jump(JGE_K, *middle, Target::Label(right), Target::Next);
    }
    emit_search(asm, below, far);
    asm.bind(right);
    emit_search(asm, from_middle, far);
}

/// One syscall's rules, in order: the first whose tests hold returns its action; a call none
/// of them takes is allowed.
fn emit_block(asm: &mut Asm, members: &[&Rule]) {
    for rule in members {
        if rule.tests.is_empty() {
            asm.ret(rule.action);
            return;
        }
        let rule_fails = asm.label();
        for test in rule.tests {
            emit_test(asm, test, rule_fails);
        }
        asm.ret(rule.action);
        asm.bind(rule_fails);
    }
    asm.ret(Action::Allow);
}
