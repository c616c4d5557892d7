//! Platform and device selection, the context and in-order queue, buffers, and program builds
//! with an on-disk binary cache.

use crate::error::{Error, Result};
use crate::loader::{clf, Api};
use opencl_sys::*;
use std::ffi::c_void;
use std::path::PathBuf;
use std::ptr;
use std::sync::Arc;

/// Environment variable choosing the platform: a number is an index, anything else a
/// case-insensitive substring of the platform name.
pub const PLATFORM_ENV: &str = "HETERO_OPENCL_PLATFORM";
/// Environment variable choosing the device, like [`PLATFORM_ENV`].
pub const DEVICE_ENV: &str = "HETERO_OPENCL_DEVICE";
/// Environment variable naming the program-binary cache directory (`off` disables the cache).
pub const CACHE_ENV: &str = "HETERO_OPENCL_CACHE";

/// How to pick a platform or a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// The n-th one the driver lists.
    Index(usize),
    /// The first whose name contains this text (case-insensitive).
    Name(String),
}

impl Selector {
    /// Parses an environment value: digits are an index, anything else a name.
    pub fn parse(s: &str) -> Selector {
        match s.trim().parse::<usize>() {
            Ok(i) => Selector::Index(i),
            Err(_) => Selector::Name(s.trim().to_string()),
        }
    }

    fn from_env(var: &str) -> Option<Selector> {
        std::env::var(var)
            .ok()
            .filter(|s| !s.trim().is_empty())
            .map(|s| Selector::parse(&s))
    }

    fn pick(&self, names: &[String]) -> Option<usize> {
        match self {
            Selector::Index(i) => (*i < names.len()).then_some(*i),
            Selector::Name(n) => {
                let n = n.to_lowercase();
                names.iter().position(|x| x.to_lowercase().contains(&n))
            }
        }
    }
}

/// What the chosen device reports.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// `CL_PLATFORM_NAME`.
    pub platform_name: String,
    /// `CL_PLATFORM_VERSION`.
    pub platform_version: String,
    /// `CL_DEVICE_NAME`.
    pub name: String,
    /// `CL_DRIVER_VERSION`.
    pub driver_version: String,
    /// `CL_DEVICE_EXTENSIONS`, split on spaces.
    pub extensions: Vec<String>,
    /// `CL_DEVICE_MEM_BASE_ADDR_ALIGN` converted from bits to bytes.
    pub base_addr_align: usize,
    /// `CL_DEVICE_MAX_WORK_GROUP_SIZE`.
    pub max_work_group_size: usize,
    /// `CL_DEVICE_LOCAL_MEM_SIZE` in bytes.
    pub local_mem_size: u64,
    /// `CL_DEVICE_GLOBAL_MEM_SIZE` in bytes.
    pub global_mem_size: u64,
    /// `CL_DEVICE_MAX_MEM_ALLOC_SIZE` in bytes (the largest single buffer).
    pub max_mem_alloc_size: u64,
    /// `CL_DEVICE_HOST_UNIFIED_MEMORY` (true for integrated GPUs and CPU devices).
    pub host_unified_memory: bool,
    /// Whether `CL_DEVICE_TYPE` says CPU (e.g. PoCL's pthread device).
    pub is_cpu: bool,
    /// `CL_DEVICE_MAX_COMPUTE_UNITS` (multiprocessors of a GPU, cores of a CPU device).
    pub compute_units: usize,
}

impl DeviceInfo {
    /// Whether the device reports this extension.
    pub fn has_extension(&self, ext: &str) -> bool {
        self.extensions.iter().any(|e| e == ext)
    }

    /// Whether the platform is NVIDIA's (the vendor-specific variants: inline PTX, the
    /// persistent decode step).
    pub fn is_nvidia(&self) -> bool {
        self.platform_name.to_ascii_lowercase().contains("nvidia")
    }
}

/// An OpenCL device with its context and one in-order command queue.
pub struct Device {
    pub(crate) api: Arc<Api>,
    pub(crate) device: cl_device_id,
    pub(crate) context: cl_context,
    pub(crate) queue: cl_command_queue,
    info: DeviceInfo,
    cache_dir: Option<PathBuf>,
    pub(crate) profiling: bool,
}

// SAFETY: the context, queue and device handles are reference-counted OpenCL objects whose
// entry points are thread-safe (OpenCL 1.2 §A.2); Device never calls clSetKernelArg.
unsafe impl Send for Device {}
// SAFETY: see Send; all methods taking &self call only thread-safe entry points.
unsafe impl Sync for Device {}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("info", &self.info).finish()
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: both handles were created by this Device and are released once; the table
        // entries exist (resolve checked every symbol).
        unsafe {
            if let Some(f) = self.api.clReleaseCommandQueue {
                f(self.queue);
            }
            if let Some(f) = self.api.clReleaseContext {
                f(self.context);
            }
        }
    }
}

pub(crate) fn check(call: &'static str, code: cl_int) -> Result<()> {
    if code == CL_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cl { call, code })
    }
}

fn platform_string(api: &Api, p: cl_platform_id, what: cl_platform_info) -> Result<String> {
    let f = clf!(api, clGetPlatformInfo);
    let mut n = 0usize;
    // SAFETY: size query with a null value pointer, as the spec allows.
    check("clGetPlatformInfo", unsafe {
        f(p, what, 0, ptr::null_mut(), &mut n)
    })?;
    let mut buf = vec![0u8; n];
    // SAFETY: buf holds exactly n bytes, the size the driver asked for.
    check("clGetPlatformInfo", unsafe {
        f(p, what, n, buf.as_mut_ptr().cast(), ptr::null_mut())
    })?;
    Ok(cstring_bytes(buf))
}

fn device_string(api: &Api, d: cl_device_id, what: cl_device_info) -> Result<String> {
    let f = clf!(api, clGetDeviceInfo);
    let mut n = 0usize;
    // SAFETY: size query with a null value pointer, as the spec allows.
    check("clGetDeviceInfo", unsafe {
        f(d, what, 0, ptr::null_mut(), &mut n)
    })?;
    let mut buf = vec![0u8; n];
    // SAFETY: buf holds exactly n bytes, the size the driver asked for.
    check("clGetDeviceInfo", unsafe {
        f(d, what, n, buf.as_mut_ptr().cast(), ptr::null_mut())
    })?;
    Ok(cstring_bytes(buf))
}

fn device_scalar<T: Copy + Default>(api: &Api, d: cl_device_id, what: cl_device_info) -> Result<T> {
    let f = clf!(api, clGetDeviceInfo);
    let mut v = T::default();
    // SAFETY: `v` is a T-sized writable value; callers pass the T that the spec gives `what`.
    check("clGetDeviceInfo", unsafe {
        f(
            d,
            what,
            std::mem::size_of::<T>(),
            (&mut v as *mut T).cast(),
            ptr::null_mut(),
        )
    })?;
    Ok(v)
}

fn cstring_bytes(mut b: Vec<u8>) -> String {
    while b.last() == Some(&0) {
        b.pop();
    }
    String::from_utf8_lossy(&b).trim().to_string()
}

/// Lists the platforms as `(name, devices' names)`, for diagnostics and selection by name.
pub fn list(api: &Api) -> Result<Vec<(String, Vec<String>)>> {
    let mut out = Vec::new();
    for p in platforms(api)? {
        let name = platform_string(api, p, CL_PLATFORM_NAME)?;
        let devs = devices(api, p)
            .unwrap_or_default()
            .into_iter()
            .map(|d| device_string(api, d, CL_DEVICE_NAME).unwrap_or_default())
            .collect();
        out.push((name, devs));
    }
    Ok(out)
}

fn platforms(api: &Api) -> Result<Vec<cl_platform_id>> {
    let f = clf!(api, clGetPlatformIDs);
    let mut n: cl_uint = 0;
    // SAFETY: count query with a null array, as the spec allows.
    let rc = unsafe { f(0, ptr::null_mut(), &mut n) };
    // The ICD loader returns CL_PLATFORM_NOT_FOUND_KHR (-1001) when no ICD is installed.
    if rc != CL_SUCCESS || n == 0 {
        return Err(Error::NoPlatform(format!(
            "clGetPlatformIDs returned {rc} with {n} platforms"
        )));
    }
    let mut v = vec![ptr::null_mut(); n as usize];
    // SAFETY: v has room for n ids.
    check("clGetPlatformIDs", unsafe {
        f(n, v.as_mut_ptr(), ptr::null_mut())
    })?;
    Ok(v)
}

fn devices(api: &Api, p: cl_platform_id) -> Result<Vec<cl_device_id>> {
    let f = clf!(api, clGetDeviceIDs);
    let mut n: cl_uint = 0;
    // SAFETY: count query with a null array.
    let rc = unsafe { f(p, CL_DEVICE_TYPE_ALL, 0, ptr::null_mut(), &mut n) };
    if rc != CL_SUCCESS || n == 0 {
        return Err(Error::NoDevice(format!(
            "clGetDeviceIDs returned {rc} with {n} devices"
        )));
    }
    let mut v = vec![ptr::null_mut(); n as usize];
    // SAFETY: v has room for n ids.
    check("clGetDeviceIDs", unsafe {
        f(p, CL_DEVICE_TYPE_ALL, n, v.as_mut_ptr(), ptr::null_mut())
    })?;
    Ok(v)
}

impl Device {
    /// Opens OpenCL the default way ([`Api::load`]) and picks platform and device from
    /// `HETERO_OPENCL_PLATFORM` / `HETERO_OPENCL_DEVICE` (default: the first of each).
    pub fn from_env() -> Result<Arc<Device>> {
        Device::from_env_with(false)
    }

    /// [`Device::from_env`] with a profiling queue when `profiling` (a second device opened
    /// this way has its own context and queue).
    pub fn from_env_with(profiling: bool) -> Result<Arc<Device>> {
        let api = Arc::new(Api::load()?);
        Device::open_with(
            api,
            Selector::from_env(PLATFORM_ENV).as_ref(),
            Selector::from_env(DEVICE_ENV).as_ref(),
            profiling,
        )
    }

    /// Opens a device on a loaded library. `None` selects the first platform / device.
    pub fn open(
        api: Arc<Api>,
        platform: Option<&Selector>,
        device: Option<&Selector>,
    ) -> Result<Arc<Device>> {
        Device::open_with(api, platform, device, false)
    }

    /// [`Device::open`] with a profiling queue (`CL_QUEUE_PROFILING_ENABLE`) when `profiling`
    /// is true, so that [`crate::Launch::enqueue_profiled`] can read kernel start/end times.
    pub fn open_with(
        api: Arc<Api>,
        platform: Option<&Selector>,
        device: Option<&Selector>,
        profiling: bool,
    ) -> Result<Arc<Device>> {
        let plats = platforms(&api)?;
        let pnames: Vec<String> = plats
            .iter()
            .map(|&p| platform_string(&api, p, CL_PLATFORM_NAME).unwrap_or_default())
            .collect();
        let pi = match platform {
            None => 0,
            Some(sel) => sel
                .pick(&pnames)
                .ok_or_else(|| Error::NoPlatform(format!("{sel:?} matches none of {pnames:?}")))?,
        };
        let p = plats[pi];
        let devs = devices(&api, p)?;
        let dnames: Vec<String> = devs
            .iter()
            .map(|&d| device_string(&api, d, CL_DEVICE_NAME).unwrap_or_default())
            .collect();
        let di = match device {
            None => 0,
            Some(sel) => sel
                .pick(&dnames)
                .ok_or_else(|| Error::NoDevice(format!("{sel:?} matches none of {dnames:?}")))?,
        };
        let d = devs[di];
        let info = DeviceInfo {
            platform_name: pnames[pi].clone(),
            platform_version: platform_string(&api, p, CL_PLATFORM_VERSION)?,
            name: dnames[di].clone(),
            driver_version: device_string(&api, d, CL_DRIVER_VERSION)?,
            extensions: device_string(&api, d, CL_DEVICE_EXTENSIONS)?
                .split_whitespace()
                .map(str::to_string)
                .collect(),
            base_addr_align: (device_scalar::<cl_uint>(&api, d, CL_DEVICE_MEM_BASE_ADDR_ALIGN)?
                as usize
                / 8)
            .max(1),
            max_work_group_size: device_scalar::<usize>(&api, d, CL_DEVICE_MAX_WORK_GROUP_SIZE)?,
            local_mem_size: device_scalar::<cl_ulong>(&api, d, CL_DEVICE_LOCAL_MEM_SIZE)?,
            global_mem_size: device_scalar::<cl_ulong>(&api, d, CL_DEVICE_GLOBAL_MEM_SIZE)?,
            max_mem_alloc_size: device_scalar::<cl_ulong>(&api, d, CL_DEVICE_MAX_MEM_ALLOC_SIZE)?,
            host_unified_memory: device_scalar::<cl_bool>(&api, d, CL_DEVICE_HOST_UNIFIED_MEMORY)
                .unwrap_or(0)
                != 0,
            is_cpu: device_scalar::<cl_device_type>(&api, d, CL_DEVICE_TYPE).unwrap_or(0)
                & CL_DEVICE_TYPE_CPU
                != 0,
            compute_units: device_scalar::<cl_uint>(&api, d, CL_DEVICE_MAX_COMPUTE_UNITS)
                .unwrap_or(1)
                .max(1) as usize,
        };
        let mut err: cl_int = 0;
        // SAFETY: one valid device id, no properties, no callback.
        let context = unsafe {
            clf!(api, clCreateContext)(ptr::null(), 1, &d, None, ptr::null_mut(), &mut err)
        };
        check("clCreateContext", err)?;
        let props = if profiling {
            CL_QUEUE_PROFILING_ENABLE
        } else {
            0
        };
        // SAFETY: context and device are valid; in-order queue, profiling as asked.
        let queue = unsafe { clf!(api, clCreateCommandQueue)(context, d, props, &mut err) };
        if err != CL_SUCCESS {
            // SAFETY: releasing the context created above, once.
            unsafe { clf!(api, clReleaseContext)(context) };
            return Err(Error::Cl {
                call: "clCreateCommandQueue",
                code: err,
            });
        }
        Ok(Arc::new(Device {
            api,
            device: d,
            context,
            queue,
            info,
            cache_dir: default_cache_dir(),
            profiling,
        }))
    }

    /// What the device reports.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The loaded library.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// The program-binary cache directory in use (`None`: caching off).
    pub fn cache_dir(&self) -> Option<&std::path::Path> {
        self.cache_dir.as_deref()
    }

    /// Replaces the cache directory (`None` turns caching off). Only possible before the device
    /// is shared, i.e. while the `Arc` is unique.
    pub fn set_cache_dir(self: &mut Arc<Self>, dir: Option<PathBuf>) -> Result<()> {
        match Arc::get_mut(self) {
            Some(d) => {
                d.cache_dir = dir;
                Ok(())
            }
            None => Err(Error::NotApplicable(
                "set_cache_dir needs the only reference to the Device",
            )),
        }
    }

    /// Submits queued work to the device without waiting.
    pub fn flush(&self) -> Result<()> {
        // SAFETY: the queue is valid for the Device's lifetime.
        check("clFlush", unsafe { clf!(self.api, clFlush)(self.queue) })
    }

    /// Waits until every queued command has finished.
    pub fn finish(&self) -> Result<()> {
        // SAFETY: the queue is valid for the Device's lifetime.
        check("clFinish", unsafe { clf!(self.api, clFinish)(self.queue) })
    }

    /// Allocates a device buffer of `len` bytes (weights, KV cache, scratch).
    pub fn alloc(self: &Arc<Self>, len: usize) -> Result<Buffer> {
        if len == 0 {
            return Err(Error::BadShape("zero-length buffer".into()));
        }
        let mut err = 0;
        // SAFETY: valid context, no host pointer, nonzero size.
        let mem = unsafe {
            clf!(self.api, clCreateBuffer)(
                self.context,
                CL_MEM_READ_WRITE,
                len,
                ptr::null_mut(),
                &mut err,
            )
        };
        check("clCreateBuffer", err)?;
        Ok(Buffer {
            device: self.clone(),
            mem,
            len,
            host: None,
        })
    }

    /// Allocates a device buffer the host never reads or writes (`CL_MEM_HOST_NO_ACCESS`, OpenCL
    /// 1.2): only kernels and device-side copies touch it (the decoder's KV cache), so a driver
    /// need keep no host-side image of it. `clEnqueueRead/WriteBuffer` on it is an error.
    pub fn alloc_device_only(self: &Arc<Self>, len: usize) -> Result<Buffer> {
        if len == 0 {
            return Err(Error::BadShape("zero-length buffer".into()));
        }
        let mut err = 0;
        // SAFETY: valid context, no host pointer, nonzero size.
        let mem = unsafe {
            clf!(self.api, clCreateBuffer)(
                self.context,
                CL_MEM_READ_WRITE | CL_MEM_HOST_NO_ACCESS,
                len,
                ptr::null_mut(),
                &mut err,
            )
        };
        check("clCreateBuffer", err)?;
        Ok(Buffer {
            device: self.clone(),
            mem,
            len,
            host: None,
        })
    }

    /// Allocates a buffer the host reads and writes by mapping it (`CL_MEM_ALLOC_HOST_PTR`): on
    /// a device with host-unified memory a map is zero-copy (the pointer is the buffer's own
    /// memory); elsewhere the driver stages it.
    pub fn alloc_host_visible(self: &Arc<Self>, len: usize) -> Result<Buffer> {
        if len == 0 {
            return Err(Error::BadShape("zero-length buffer".into()));
        }
        let mut err = 0;
        // SAFETY: valid context, no host pointer, nonzero size.
        let mem = unsafe {
            clf!(self.api, clCreateBuffer)(
                self.context,
                CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR,
                len,
                ptr::null_mut(),
                &mut err,
            )
        };
        check("clCreateBuffer", err)?;
        Ok(Buffer {
            device: self.clone(),
            mem,
            len,
            host: None,
        })
    }

    /// Allocates a device buffer and fills it with `data`.
    pub fn upload<T: Copy>(self: &Arc<Self>, data: &[T]) -> Result<Buffer> {
        let b = self.alloc(std::mem::size_of_val(data))?;
        b.write(data)?;
        Ok(b)
    }

    /// Wraps caller-owned host memory as a zero-copy buffer (`CL_MEM_USE_HOST_PTR`): on a
    /// unified-memory device kernels read and write that memory directly. The pointer must be
    /// aligned to [`DeviceInfo::base_addr_align`] (checked: [`Error::Misaligned`]).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes, and stay allocated and unmoved for as
    /// long as the returned buffer, any [`Buffer::try_clone`] of it and any launch bound to it
    /// live. While a launch that uses
    /// it may be running, the host must not access the memory except through the completion
    /// protocol (see [`crate::Flag`]) or after [`Device::finish`] / [`Buffer::sync_to_host`].
    pub unsafe fn wrap_host(self: &Arc<Self>, ptr: *mut u8, len: usize) -> Result<Buffer> {
        if len == 0 {
            return Err(Error::BadShape("zero-length buffer".into()));
        }
        let align = self.info.base_addr_align;
        if ptr.is_null() || !(ptr as usize).is_multiple_of(align) {
            return Err(Error::Misaligned {
                addr: ptr as usize,
                required: align,
            });
        }
        let mut err = 0;
        // SAFETY: the caller guarantees ptr..ptr+len is valid for the buffer's lifetime.
        let mem = unsafe {
            clf!(self.api, clCreateBuffer)(
                self.context,
                CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR,
                len,
                ptr.cast(),
                &mut err,
            )
        };
        check("clCreateBuffer", err)?;
        Ok(Buffer {
            device: self.clone(),
            mem,
            len,
            host: Some(ptr as usize),
        })
    }

    /// Copies `len` bytes from `src` to `dst` on the device (`clEnqueueCopyBuffer`), queued.
    pub fn copy(&self, src: &Buffer, dst: &Buffer, len: usize) -> Result<()> {
        if len > src.len || len > dst.len {
            return Err(Error::BufferTooSmall {
                what: "copy",
                needed: len,
                got: src.len.min(dst.len),
            });
        }
        // SAFETY: both buffers are valid and at least len bytes long.
        check("clEnqueueCopyBuffer", unsafe {
            clf!(self.api, clEnqueueCopyBuffer)(
                self.queue,
                src.mem,
                dst.mem,
                0,
                0,
                len,
                0,
                ptr::null(),
                ptr::null_mut(),
            )
        })
    }

    /// Builds an OpenCL C program, through the on-disk binary cache when one is configured.
    pub fn build(self: &Arc<Self>, source: &str, options: &str) -> Result<Program> {
        let key = cache_key(source, options, &self.info);
        let path = self
            .cache_dir
            .as_ref()
            .map(|d| d.join(format!("{key:016x}.bin")));
        if let Some(p) = &path {
            if let Ok(bin) = std::fs::read(p) {
                if let Ok(prog) = self.build_binary(&bin, options) {
                    return Ok(Program {
                        device: self.clone(),
                        program: prog,
                        from_cache: true,
                    });
                }
            }
        }
        let program = self.build_source(source, options)?;
        let prog = Program {
            device: self.clone(),
            program,
            from_cache: false,
        };
        if let Some(p) = &path {
            // A cache that cannot be written only costs a rebuild next time.
            if let Ok(bin) = prog.binary() {
                let _ = write_atomic(p, &bin);
            }
        }
        Ok(prog)
    }

    fn build_source(&self, source: &str, options: &str) -> Result<cl_program> {
        let mut err = 0;
        let mut src_ptr = source.as_ptr().cast::<libc::c_char>();
        let src_len = source.len();
        // SAFETY: one string given with its explicit length (no NUL needed).
        let program = unsafe {
            clf!(self.api, clCreateProgramWithSource)(
                self.context,
                1,
                &mut src_ptr,
                &src_len,
                &mut err,
            )
        };
        check("clCreateProgramWithSource", err)?;
        self.finish_build(program, options)?;
        Ok(program)
    }

    fn build_binary(&self, bin: &[u8], options: &str) -> Result<cl_program> {
        let mut err = 0;
        let mut status = 0;
        let mut bptr = bin.as_ptr();
        let blen = bin.len();
        // SAFETY: one device, one binary of blen bytes.
        let program = unsafe {
            clf!(self.api, clCreateProgramWithBinary)(
                self.context,
                1,
                &self.device,
                &blen,
                &mut bptr,
                &mut status,
                &mut err,
            )
        };
        check("clCreateProgramWithBinary", err)?;
        check("clCreateProgramWithBinary", status)?;
        self.finish_build(program, options)?;
        Ok(program)
    }

    fn finish_build(&self, program: cl_program, options: &str) -> Result<()> {
        let opts = std::ffi::CString::new(options)
            .map_err(|_| Error::BadShape("build options contain a NUL byte".into()))?;
        // SAFETY: valid program and device; options NUL-terminated; no callback.
        let rc = unsafe {
            clf!(self.api, clBuildProgram)(
                program,
                1,
                &self.device,
                opts.as_ptr(),
                None,
                ptr::null_mut(),
            )
        };
        if rc != CL_SUCCESS {
            let log = self.build_log(program).unwrap_or_default();
            // SAFETY: the program was created above and is released once, here.
            unsafe { clf!(self.api, clReleaseProgram)(program) };
            return Err(Error::Build { code: rc, log });
        }
        Ok(())
    }

    fn build_log(&self, program: cl_program) -> Result<String> {
        let f = clf!(self.api, clGetProgramBuildInfo);
        let mut n = 0usize;
        // SAFETY: size query.
        check("clGetProgramBuildInfo", unsafe {
            f(
                program,
                self.device,
                CL_PROGRAM_BUILD_LOG,
                0,
                ptr::null_mut(),
                &mut n,
            )
        })?;
        let mut buf = vec![0u8; n];
        // SAFETY: buf has the n bytes asked for.
        check("clGetProgramBuildInfo", unsafe {
            f(
                program,
                self.device,
                CL_PROGRAM_BUILD_LOG,
                n,
                buf.as_mut_ptr().cast(),
                ptr::null_mut(),
            )
        })?;
        Ok(cstring_bytes(buf))
    }
}

fn default_cache_dir() -> Option<PathBuf> {
    match std::env::var(CACHE_ENV) {
        Ok(v) if v == "off" => return None,
        Ok(v) if !v.is_empty() => return Some(PathBuf::from(v)),
        _ => {}
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("hetero").join("opencl"))
}

fn write_atomic(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, data)?;
    std::fs::rename(tmp, path)
}

/// FNV-1a 64 over the source, the options, and the platform/device/driver identity: a binary
/// from another driver version or another device is never loaded.
pub fn cache_key(source: &str, options: &str, info: &DeviceInfo) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [
        source,
        options,
        &info.platform_name,
        &info.platform_version,
        &info.name,
        &info.driver_version,
    ] {
        for b in part.bytes().chain(std::iter::once(0xff)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// A built program. Kernels are created from it by [`crate::Kernels`].
pub struct Program {
    pub(crate) device: Arc<Device>,
    pub(crate) program: cl_program,
    from_cache: bool,
}

// SAFETY: program objects are thread-safe OpenCL objects (only clSetKernelArg is not, and it
// applies to kernels).
unsafe impl Send for Program {}
// SAFETY: see Send.
unsafe impl Sync for Program {}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("from_cache", &self.from_cache)
            .finish()
    }
}

impl Program {
    /// Whether this program was loaded from the binary cache.
    pub fn from_cache(&self) -> bool {
        self.from_cache
    }

    /// The device binary (what the cache stores).
    pub fn binary(&self) -> Result<Vec<u8>> {
        let api = &self.device.api;
        let f = clf!(api, clGetProgramInfo);
        let mut size = 0usize;
        // SAFETY: one device, so one size_t.
        check("clGetProgramInfo", unsafe {
            f(
                self.program,
                CL_PROGRAM_BINARY_SIZES,
                std::mem::size_of::<usize>(),
                (&mut size as *mut usize).cast(),
                ptr::null_mut(),
            )
        })?;
        if size == 0 {
            return Err(Error::NotApplicable("the driver gave no program binary"));
        }
        let mut bin = vec![0u8; size];
        let mut p = bin.as_mut_ptr();
        // SAFETY: an array of one pointer to `size` writable bytes.
        check("clGetProgramInfo", unsafe {
            f(
                self.program,
                CL_PROGRAM_BINARIES,
                std::mem::size_of::<*mut u8>(),
                (&mut p as *mut *mut u8).cast(),
                ptr::null_mut(),
            )
        })?;
        Ok(bin)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        if let Some(f) = self.device.api.clReleaseProgram {
            // SAFETY: created by this Program and released once.
            unsafe { f(self.program) };
        }
    }
}

/// A buffer object: device memory, or caller-owned host memory wrapped zero-copy.
pub struct Buffer {
    pub(crate) device: Arc<Device>,
    pub(crate) mem: cl_mem,
    len: usize,
    host: Option<usize>,
}

// SAFETY: memory objects are thread-safe OpenCL objects.
unsafe impl Send for Buffer {}
// SAFETY: see Send.
unsafe impl Sync for Buffer {}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("len", &self.len)
            .field("host", &self.host)
            .finish()
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(f) = self.device.api.clReleaseMemObject {
            // SAFETY: each Buffer value owns one reference to the memory object (taken by
            // clCreateBuffer or, for a clone, by clRetainMemObject) and releases it once, here.
            // clSetKernelArg retains nothing, so a Launch keeps clones of the buffers it binds.
            unsafe { f(self.mem) };
        }
    }
}

impl Buffer {
    /// Another reference to the same memory object (`clRetainMemObject`), not a copy of the
    /// data: the memory lives until the last reference is dropped. This is how a
    /// [`crate::Launch`] owns the buffers it binds. A zero-copy buffer's host memory is not
    /// kept alive by it (see [`Device::wrap_host`]).
    pub fn try_clone(&self) -> Result<Buffer> {
        // SAFETY: `mem` is a live memory object (self holds a reference); the matching release
        // is the new value's Drop.
        check("clRetainMemObject", unsafe {
            clf!(self.device.api, clRetainMemObject)(self.mem)
        })?;
        Ok(Buffer {
            device: self.device.clone(),
            mem: self.mem,
            len: self.len,
            host: self.host,
        })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// A sub-buffer (`clCreateSubBuffer`): `len` bytes of this buffer from `offset`, which
    /// must be a multiple of the device's base address alignment ([`Error::Misaligned`]).
    /// Kernels see it as a buffer of its own; it keeps this buffer's memory alive.
    pub fn sub(&self, offset: usize, len: usize) -> Result<Buffer> {
        if len == 0 || offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(Error::BadShape(format!(
                "sub-buffer {offset}+{len} of a {}-byte buffer",
                self.len
            )));
        }
        let align = self.device.info().base_addr_align;
        if !offset.is_multiple_of(align) {
            return Err(Error::Misaligned {
                addr: offset,
                required: align,
            });
        }
        let region = cl_buffer_region {
            origin: offset,
            size: len,
        };
        let mut err = 0;
        // SAFETY: a live buffer, a region inside it (checked above) at an aligned origin;
        // `region` outlives the call.
        let mem = unsafe {
            clf!(self.device.api, clCreateSubBuffer)(
                self.mem,
                CL_MEM_READ_WRITE,
                CL_BUFFER_CREATE_TYPE_REGION,
                (&region as *const cl_buffer_region).cast(),
                &mut err,
            )
        };
        check("clCreateSubBuffer", err)?;
        Ok(Buffer {
            device: self.device.clone(),
            mem,
            len,
            host: self.host.map(|a| a + offset),
        })
    }

    /// Always false (zero-length buffers are refused at creation).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The wrapped host address, for zero-copy buffers.
    pub fn host_ptr(&self) -> Option<*mut u8> {
        self.host.map(|a| a as *mut u8)
    }

    /// Blocking write of `data` at offset 0.
    pub fn write<T: Copy>(&self, data: &[T]) -> Result<()> {
        let n = std::mem::size_of_val(data);
        if n > self.len {
            return Err(Error::BufferTooSmall {
                what: "write",
                needed: n,
                got: self.len,
            });
        }
        // SAFETY: blocking write of n bytes from a live slice into a buffer of >= n bytes.
        check("clEnqueueWriteBuffer", unsafe {
            clf!(self.device.api, clEnqueueWriteBuffer)(
                self.device.queue,
                self.mem,
                CL_TRUE,
                0,
                n,
                data.as_ptr().cast::<c_void>(),
                0,
                ptr::null(),
                ptr::null_mut(),
            )
        })
    }

    /// Blocking read into `out` from offset 0 (waits for queued work that writes the buffer).
    pub fn read<T: Copy>(&self, out: &mut [T]) -> Result<()> {
        let n = std::mem::size_of_val(out);
        if n > self.len {
            return Err(Error::BufferTooSmall {
                what: "read",
                needed: n,
                got: self.len,
            });
        }
        // SAFETY: blocking read of n bytes into a live, writable slice of n bytes.
        check("clEnqueueReadBuffer", unsafe {
            clf!(self.device.api, clEnqueueReadBuffer)(
                self.device.queue,
                self.mem,
                CL_TRUE,
                0,
                n,
                out.as_mut_ptr().cast::<c_void>(),
                0,
                ptr::null(),
                ptr::null_mut(),
            )
        })
    }

    /// For a zero-copy buffer: map it for reading and unmap at once, which makes the device's
    /// writes visible in the host memory on every implementation (on a unified device this is
    /// a no-op; on a discrete one it copies back). Blocks until queued work is done.
    pub fn sync_to_host(&self) -> Result<()> {
        let api = &self.device.api;
        let mut err = 0;
        // SAFETY: blocking map of the whole buffer for reading.
        let p = unsafe {
            clf!(api, clEnqueueMapBuffer)(
                self.device.queue,
                self.mem,
                CL_TRUE,
                CL_MAP_READ,
                0,
                self.len,
                0,
                ptr::null(),
                ptr::null_mut(),
                &mut err,
            )
        };
        check("clEnqueueMapBuffer", err)?;
        // SAFETY: unmapping the pointer the map above returned.
        check("clEnqueueUnmapMemObject", unsafe {
            clf!(api, clEnqueueUnmapMemObject)(
                self.device.queue,
                self.mem,
                p,
                0,
                ptr::null(),
                ptr::null_mut(),
            )
        })?;
        self.device.finish()
    }
}
