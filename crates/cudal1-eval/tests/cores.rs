//! Reserving a GPU's timing core narrows this process's threads, later threads and later child
//! processes to the other cores (a file of its own: it changes the whole test process).

use cudal1_eval::cores::{current_cores, reserve, timing_core};
use cudal1_eval::Device;

/// A child process's cores, as the kernel lists them (`0-3,6`).
fn cores_of_a_child() -> Vec<usize> {
    let out = std::process::Command::new("sh")
        .args(["-c", "grep Cpus_allowed_list /proc/self/status"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let list = text.split(':').nth(1).unwrap().trim().to_owned();
    list.split(',')
        .flat_map(|part| {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()
        })
        .collect()
}

#[test]
fn other_work_moves_off_the_timing_core() {
    let before = current_cores();
    if before.len() < 2 {
        eprintln!("one core: nothing to reserve");
        return;
    }
    let core = timing_core(&Device::Cuda(0)).expect("two cores: one for timing");
    assert_eq!(core, before[before.len() / 2]);
    let early = std::thread::spawn(|| {
        std::thread::park_timeout(std::time::Duration::from_millis(300));
        current_cores()
    });
    reserve(&[Device::Cuda(0)]).unwrap();
    let rest: Vec<usize> = before.iter().copied().filter(|&c| c != core).collect();
    assert_eq!(current_cores(), rest);
    assert_eq!(std::thread::spawn(current_cores).join().unwrap(), rest, "a later thread");
    assert_eq!(early.join().unwrap(), rest, "a thread started before");
    assert_eq!(cores_of_a_child(), rest, "a child process");
    // The plan still names the same core after the mask narrowed.
    assert_eq!(timing_core(&Device::Cuda(0)), Some(core));
    assert_eq!(timing_core(&Device::Cpu), None);
}
