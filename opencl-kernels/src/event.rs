//! Commands whose completion the host waits for with a bound: events, non-blocking transfers
//! and maps, and a queue gate (a user event that holds the queue; what the tests use to prove
//! that a hung or failing device gives an error instead of a hang).

use crate::device::{check, Buffer, Device};
use crate::error::{Error, Result};
use crate::loader::clf;
use opencl_sys::*;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One OpenCL event, released on drop.
pub(crate) struct Event {
    device: Arc<Device>,
    ev: cl_event,
}

// SAFETY: event objects are thread-safe OpenCL objects.
unsafe impl Send for Event {}

impl Drop for Event {
    fn drop(&mut self) {
        if let Some(f) = self.device.api.clReleaseEvent {
            // SAFETY: the event came from an enqueue or clCreateUserEvent and is released once.
            unsafe { f(self.ev) };
        }
    }
}

impl Event {
    /// Takes ownership of an event an enqueue returned.
    pub(crate) fn own(device: &Arc<Device>, ev: cl_event) -> Event {
        Event {
            device: device.clone(),
            ev,
        }
    }

    /// `CL_EVENT_COMMAND_EXECUTION_STATUS`: `CL_COMPLETE` (0), a positive state, or a negative
    /// error code (the command failed).
    pub(crate) fn status(&self) -> Result<cl_int> {
        let mut st: cl_int = 0;
        // SAFETY: a valid event and a cl_int out-value of the size given.
        check("clGetEventInfo", unsafe {
            clf!(self.device.api, clGetEventInfo)(
                self.ev,
                CL_EVENT_COMMAND_EXECUTION_STATUS,
                std::mem::size_of::<cl_int>(),
                (&mut st as *mut cl_int).cast(),
                ptr::null_mut(),
            )
        })
        .map_err(|e| match e {
            Error::Cl { call, code } => Error::from_enqueue(call, code),
            e => e,
        })?;
        Ok(st)
    }

    /// Waits until the command completes, fails ([`Error::DeviceLost`]) or `timeout` passes
    /// ([`Error::WaitTimeout`]). Flushes the queue first so the command is submitted.
    pub(crate) fn wait(&self, what: &'static str, timeout: Duration) -> Result<()> {
        self.device.flush().map_err(lost_or)?;
        wait_status(what, timeout, || self.status())
    }

    /// The device's start and end timestamps of a profiled command, in ns.
    pub(crate) fn profile_ns(&self) -> Result<(u64, u64)> {
        let mut t = [0u64; 2];
        for (slot, what) in t
            .iter_mut()
            .zip([CL_PROFILING_COMMAND_START, CL_PROFILING_COMMAND_END])
        {
            // SAFETY: a cl_ulong out-value of the size given.
            check("clGetEventProfilingInfo", unsafe {
                clf!(self.device.api, clGetEventProfilingInfo)(
                    self.ev,
                    what,
                    8,
                    (slot as *mut u64).cast(),
                    ptr::null_mut(),
                )
            })?;
        }
        Ok((t[0], t[1]))
    }
}

/// Polls `status` (an event's execution status) until it is `CL_COMPLETE` (Ok), negative
/// (the command failed: [`Error::DeviceLost`]) or `timeout` has passed ([`Error::WaitTimeout`]);
/// spins for the first 200 µs (a decode step's readback), then yields, then sleeps 100 µs per
/// poll after 20 ms.
pub(crate) fn wait_status(
    what: &'static str,
    timeout: Duration,
    mut status: impl FnMut() -> Result<cl_int>,
) -> Result<()> {
    let start = Instant::now();
    loop {
        let st = status()?;
        if st == CL_COMPLETE {
            return Ok(());
        }
        if st < 0 {
            return Err(Error::DeviceLost {
                during: what,
                code: st,
            });
        }
        let waited = start.elapsed();
        if waited > timeout {
            return Err(Error::WaitTimeout {
                what,
                after_ms: timeout.as_millis() as u64,
            });
        }
        if waited < Duration::from_micros(200) {
            std::hint::spin_loop();
        } else if waited < Duration::from_millis(20) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

/// `e` as [`Error::DeviceLost`] when its code says the device is gone (see
/// [`Error::from_enqueue`]).
pub(crate) fn lost_or(e: Error) -> Error {
    match e {
        Error::Cl { call, code } => Error::from_enqueue(call, code),
        e => e,
    }
}

/// Enqueues a non-blocking read of `len` bytes at `offset` of `src` into `dst`.
///
/// # Safety
/// `dst..dst+len` must stay valid and untouched by the host until the returned event has
/// completed (or forever, if it never does).
pub(crate) unsafe fn read_async(
    src: &Buffer,
    offset: usize,
    len: usize,
    dst: *mut u8,
) -> Result<Event> {
    if offset + len > src.len() {
        return Err(Error::BufferTooSmall {
            what: "read",
            needed: offset + len,
            got: src.len(),
        });
    }
    let dev = src.device.clone();
    let mut ev: cl_event = ptr::null_mut();
    // SAFETY: a range inside the buffer; `dst` valid for `len` bytes until the event completes
    // (the caller's contract).
    let rc = unsafe {
        clf!(dev.api, clEnqueueReadBuffer)(
            dev.queue,
            src.mem,
            CL_FALSE,
            offset,
            len,
            dst.cast::<c_void>(),
            0,
            ptr::null(),
            &mut ev,
        )
    };
    if rc != CL_SUCCESS {
        return Err(Error::from_enqueue("clEnqueueReadBuffer", rc));
    }
    Ok(Event::own(&dev, ev))
}

/// Enqueues a non-blocking write of `len` bytes from `src` to `offset` of `dst`.
///
/// # Safety
/// `src..src+len` must stay valid and unchanged until the returned event has completed (or
/// forever, if it never does).
pub(crate) unsafe fn write_async(
    dst: &Buffer,
    offset: usize,
    len: usize,
    src: *const u8,
) -> Result<Event> {
    if offset + len > dst.len() {
        return Err(Error::BufferTooSmall {
            what: "write",
            needed: offset + len,
            got: dst.len(),
        });
    }
    let dev = dst.device.clone();
    let mut ev: cl_event = ptr::null_mut();
    // SAFETY: a range inside the buffer; `src` valid for `len` bytes until the event completes
    // (the caller's contract).
    let rc = unsafe {
        clf!(dev.api, clEnqueueWriteBuffer)(
            dev.queue,
            dst.mem,
            CL_FALSE,
            offset,
            len,
            src.cast::<c_void>(),
            0,
            ptr::null(),
            &mut ev,
        )
    };
    if rc != CL_SUCCESS {
        return Err(Error::from_enqueue("clEnqueueWriteBuffer", rc));
    }
    Ok(Event::own(&dev, ev))
}

/// Enqueues a non-blocking map of `len` bytes at `offset` of `buf` with `flags`; the pointer
/// is usable once the event completes, until [`unmap`].
pub(crate) fn map_async(
    buf: &Buffer,
    flags: cl_map_flags,
    offset: usize,
    len: usize,
) -> Result<(*mut u8, Event)> {
    if len == 0 || offset + len > buf.len() {
        return Err(Error::BufferTooSmall {
            what: "map",
            needed: offset + len,
            got: buf.len(),
        });
    }
    let dev = buf.device.clone();
    let mut ev: cl_event = ptr::null_mut();
    let mut err: cl_int = 0;
    // SAFETY: a range inside the buffer; the pointer is only used after the event completes.
    let p = unsafe {
        clf!(dev.api, clEnqueueMapBuffer)(
            dev.queue,
            buf.mem,
            CL_FALSE,
            flags,
            offset,
            len,
            0,
            ptr::null(),
            &mut ev,
            &mut err,
        )
    };
    if err != CL_SUCCESS {
        return Err(Error::from_enqueue("clEnqueueMapBuffer", err));
    }
    Ok((p.cast(), Event::own(&dev, ev)))
}

/// Enqueues the unmap of a pointer [`map_async`] returned for `buf`.
pub(crate) fn unmap(buf: &Buffer, p: *mut u8) -> Result<()> {
    let dev = &buf.device;
    // SAFETY: `p` is a live mapping of this buffer (the caller's bookkeeping).
    let rc = unsafe {
        clf!(dev.api, clEnqueueUnmapMemObject)(
            dev.queue,
            buf.mem,
            p.cast(),
            0,
            ptr::null(),
            ptr::null_mut(),
        )
    };
    if rc != CL_SUCCESS {
        return Err(Error::from_enqueue("clEnqueueUnmapMemObject", rc));
    }
    Ok(())
}

/// Enqueues a device-side copy of `len` bytes between two buffers, at byte offsets.
pub(crate) fn copy_region(
    src: &Buffer,
    src_off: usize,
    dst: &Buffer,
    dst_off: usize,
    len: usize,
) -> Result<()> {
    if src_off + len > src.len() || dst_off + len > dst.len() {
        return Err(Error::BufferTooSmall {
            what: "copy",
            needed: (src_off + len).max(dst_off + len),
            got: src.len().min(dst.len()),
        });
    }
    let dev = &src.device;
    // SAFETY: both ranges lie inside their buffers.
    let rc = unsafe {
        clf!(dev.api, clEnqueueCopyBuffer)(
            dev.queue,
            src.mem,
            dst.mem,
            src_off,
            dst_off,
            len,
            0,
            ptr::null(),
            ptr::null_mut(),
        )
    };
    if rc != CL_SUCCESS {
        return Err(Error::from_enqueue("clEnqueueCopyBuffer", rc));
    }
    Ok(())
}

/// Holds a device's queue: every command enqueued after [`Device::gate`] waits until the gate
/// is opened (or dropped). For tests and fault injection: it makes a device that stops
/// answering, to prove that the waits on it are bounded. (Ending the gate with an error status
/// instead, as a lost device's commands end, aborts PoCL 3.1 inside the driver, so the
/// failed-status path is proven by `wait_status` on injected statuses.)
pub struct QueueGate {
    ev: Event,
    released: bool,
}

impl std::fmt::Debug for QueueGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueGate")
            .field("released", &self.released)
            .finish()
    }
}

impl Device {
    /// Enqueues a barrier that waits on a new user event and returns the gate that releases it
    /// (see [`QueueGate`]).
    pub fn gate(self: &Arc<Self>) -> Result<QueueGate> {
        let mut err: cl_int = 0;
        // SAFETY: a valid context.
        let ev = unsafe { clf!(self.api, clCreateUserEvent)(self.context, &mut err) };
        check("clCreateUserEvent", err)?;
        let ev = Event::own(self, ev);
        // SAFETY: a wait list of one valid event; no event out.
        let rc = unsafe {
            clf!(self.api, clEnqueueBarrierWithWaitList)(self.queue, 1, &ev.ev, ptr::null_mut())
        };
        check("clEnqueueBarrierWithWaitList", rc)?;
        Ok(QueueGate {
            ev,
            released: false,
        })
    }
}

impl QueueGate {
    fn release(&mut self) -> Result<()> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        let dev = self.ev.device.clone();
        // SAFETY: a user event created by Device::gate whose status was not set yet.
        check("clSetUserEventStatus", unsafe {
            clf!(dev.api, clSetUserEventStatus)(self.ev.ev, CL_COMPLETE)
        })
    }

    /// Lets the held commands run.
    pub fn open(mut self) -> Result<()> {
        self.release()
    }
}

impl Drop for QueueGate {
    fn drop(&mut self) {
        // A gate left closed would hold the queue forever.
        let _ = self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_status_completes_fails_or_times_out() {
        // Queued, submitted, running, then complete.
        let mut seq = [3, 2, 1, 0].into_iter();
        assert_eq!(
            wait_status("x", Duration::from_secs(5), || Ok(seq.next().unwrap_or(0))),
            Ok(())
        );
        // A negative status (the command was terminated: device lost) is an error at once.
        let mut seq = [2, 1, CL_DEVICE_NOT_AVAILABLE].into_iter();
        assert_eq!(
            wait_status("step", Duration::from_secs(5), || Ok(seq
                .next()
                .unwrap_or(0))),
            Err(Error::DeviceLost {
                during: "step",
                code: CL_DEVICE_NOT_AVAILABLE
            })
        );
        // Never completing: WaitTimeout after the bound, not a hang.
        let t0 = Instant::now();
        assert_eq!(
            wait_status("hung", Duration::from_millis(50), || Ok(1)),
            Err(Error::WaitTimeout {
                what: "hung",
                after_ms: 50
            })
        );
        assert!(t0.elapsed() < Duration::from_secs(5));
        // A failing status query passes its error on.
        let e = Error::Cl {
            call: "clGetEventInfo",
            code: -36,
        };
        assert_eq!(
            wait_status("q", Duration::from_secs(1), || Err(e.clone())),
            Err(e)
        );
    }

    #[test]
    fn enqueue_codes_that_mean_a_lost_device() {
        for code in [-2, -5, -14, -9999] {
            assert_eq!(
                Error::from_enqueue("clEnqueueNDRangeKernel", code),
                Error::DeviceLost {
                    during: "clEnqueueNDRangeKernel",
                    code
                }
            );
        }
        assert_eq!(
            Error::from_enqueue("clEnqueueNDRangeKernel", -38),
            Error::Cl {
                call: "clEnqueueNDRangeKernel",
                code: -38
            }
        );
    }
}
