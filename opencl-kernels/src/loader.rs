//! Run-time loading of the OpenCL library: dlopen, then dlsym every entry point into a table of
//! function pointers typed by `opencl-sys`'s `cl_function_types`.

use crate::error::{Error, Result};
use opencl_sys::cl_function_types as ft;
use std::ffi::{CStr, CString};

/// The environment variable naming an OpenCL library path to try after the default sonames.
pub const LIB_ENV: &str = "HETERO_OPENCL_LIB";

/// The sonames tried first, in order.
pub const DEFAULT_LIBS: [&str; 2] = ["libOpenCL.so.1", "libOpenCL.so"];

/// An open `dlopen` handle, closed on drop.
struct Library {
    handle: *mut libc::c_void,
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: `handle` came from a successful dlopen and is closed exactly once, here; the
        // function table that borrows it is dropped with it (same struct).
        unsafe {
            libc::dlclose(self.handle);
        }
    }
}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns either null or a NUL-terminated string owned by libc that stays
    // valid until the next dl* call on this thread; we copy it at once.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown dlopen error".to_string()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

fn open(path: &str) -> std::result::Result<Library, String> {
    let c = CString::new(path).map_err(|_| "path contains a NUL byte".to_string())?;
    // SAFETY: `c` is a valid NUL-terminated string; dlopen has no other precondition.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        Err(dlerror_text())
    } else {
        Ok(Library { handle })
    }
}

macro_rules! api_table {
    ($($name:ident),* $(,)?) => {
        /// The OpenCL entry points this crate uses, resolved with dlsym. The library handle lives
        /// in the same struct, so the pointers never outlive it.
        #[allow(non_snake_case)]
        pub struct Api {
            $(pub(crate) $name: paste_t!($name),)*
            path: String,
            _lib: Library,
        }

        impl Api {
            fn resolve(lib: Library, path: String) -> Result<Api> {
                $(
                    #[allow(non_snake_case)]
                    let $name: paste_t!($name) = {
                        let sym = concat!(stringify!($name), "\0");
                        // SAFETY: `lib.handle` is a live dlopen handle and `sym` is NUL-terminated.
                        let p = unsafe { libc::dlsym(lib.handle, sym.as_ptr().cast()) };
                        if p.is_null() {
                            return Err(Error::MissingSymbol(stringify!($name)));
                        }
                        // SAFETY: the symbol is the OpenCL entry point of that name, whose C
                        // signature is the one `cl_function_types` declares (Khronos headers);
                        // a non-null data pointer and `Option<extern fn>` have the same size.
                        unsafe { std::mem::transmute::<*mut libc::c_void, paste_t!($name)>(p) }
                    };
                )*
                Ok(Api { $($name,)* path, _lib: lib })
            }
        }
    };
}

macro_rules! paste_t {
    (clGetPlatformIDs) => {
        ft::clGetPlatformIDs_t
    };
    (clGetPlatformInfo) => {
        ft::clGetPlatformInfo_t
    };
    (clGetDeviceIDs) => {
        ft::clGetDeviceIDs_t
    };
    (clGetDeviceInfo) => {
        ft::clGetDeviceInfo_t
    };
    (clCreateContext) => {
        ft::clCreateContext_t
    };
    (clReleaseContext) => {
        ft::clReleaseContext_t
    };
    (clCreateCommandQueue) => {
        ft::clCreateCommandQueue_t
    };
    (clReleaseCommandQueue) => {
        ft::clReleaseCommandQueue_t
    };
    (clCreateBuffer) => {
        ft::clCreateBuffer_t
    };
    (clReleaseMemObject) => {
        ft::clReleaseMemObject_t
    };
    (clCreateSubBuffer) => {
        ft::clCreateSubBuffer_t
    };
    (clCreateProgramWithSource) => {
        ft::clCreateProgramWithSource_t
    };
    (clCreateProgramWithBinary) => {
        ft::clCreateProgramWithBinary_t
    };
    (clBuildProgram) => {
        ft::clBuildProgram_t
    };
    (clGetProgramBuildInfo) => {
        ft::clGetProgramBuildInfo_t
    };
    (clGetProgramInfo) => {
        ft::clGetProgramInfo_t
    };
    (clReleaseProgram) => {
        ft::clReleaseProgram_t
    };
    (clCreateKernel) => {
        ft::clCreateKernel_t
    };
    (clReleaseKernel) => {
        ft::clReleaseKernel_t
    };
    (clSetKernelArg) => {
        ft::clSetKernelArg_t
    };
    (clEnqueueNDRangeKernel) => {
        ft::clEnqueueNDRangeKernel_t
    };
    (clEnqueueWriteBuffer) => {
        ft::clEnqueueWriteBuffer_t
    };
    (clEnqueueReadBuffer) => {
        ft::clEnqueueReadBuffer_t
    };
    (clEnqueueCopyBuffer) => {
        ft::clEnqueueCopyBuffer_t
    };
    (clEnqueueMapBuffer) => {
        ft::clEnqueueMapBuffer_t
    };
    (clEnqueueUnmapMemObject) => {
        ft::clEnqueueUnmapMemObject_t
    };
    (clFlush) => {
        ft::clFlush_t
    };
    (clFinish) => {
        ft::clFinish_t
    };
    (clWaitForEvents) => {
        ft::clWaitForEvents_t
    };
    (clReleaseEvent) => {
        ft::clReleaseEvent_t
    };
    (clGetEventProfilingInfo) => {
        ft::clGetEventProfilingInfo_t
    };
    (clRetainMemObject) => {
        ft::clRetainMemObject_t
    };
    (clGetEventInfo) => {
        ft::clGetEventInfo_t
    };
    (clCreateUserEvent) => {
        ft::clCreateUserEvent_t
    };
    (clSetUserEventStatus) => {
        ft::clSetUserEventStatus_t
    };
    (clEnqueueBarrierWithWaitList) => {
        ft::clEnqueueBarrierWithWaitList_t
    };
}

api_table!(
    clGetPlatformIDs,
    clGetPlatformInfo,
    clGetDeviceIDs,
    clGetDeviceInfo,
    clCreateContext,
    clReleaseContext,
    clCreateCommandQueue,
    clReleaseCommandQueue,
    clCreateBuffer,
    clReleaseMemObject,
    clCreateSubBuffer,
    clCreateProgramWithSource,
    clCreateProgramWithBinary,
    clBuildProgram,
    clGetProgramBuildInfo,
    clGetProgramInfo,
    clReleaseProgram,
    clCreateKernel,
    clReleaseKernel,
    clSetKernelArg,
    clEnqueueNDRangeKernel,
    clEnqueueWriteBuffer,
    clEnqueueReadBuffer,
    clEnqueueCopyBuffer,
    clEnqueueMapBuffer,
    clEnqueueUnmapMemObject,
    clFlush,
    clFinish,
    clWaitForEvents,
    clReleaseEvent,
    clGetEventProfilingInfo,
    clRetainMemObject,
    clGetEventInfo,
    clCreateUserEvent,
    clSetUserEventStatus,
    clEnqueueBarrierWithWaitList,
);

// SAFETY: the table holds plain function pointers into a library that stays loaded while the
// table lives, and a dlopen handle; OpenCL entry points are thread-safe (OpenCL 1.2 §A.2) except
// clSetKernelArg on one kernel object, which this crate only calls through `&mut` access.
unsafe impl Send for Api {}
// SAFETY: as for Send: shared access only calls thread-safe entry points.
unsafe impl Sync for Api {}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api").field("path", &self.path).finish()
    }
}

impl Api {
    /// Loads OpenCL the default way: `libOpenCL.so.1`, then `libOpenCL.so`, then the path in
    /// [`LIB_ENV`] (`HETERO_OPENCL_LIB`) if it is set. The first that opens and resolves wins.
    pub fn load() -> Result<Api> {
        let mut candidates: Vec<String> = DEFAULT_LIBS.iter().map(|s| s.to_string()).collect();
        if let Ok(p) = std::env::var(LIB_ENV) {
            if !p.is_empty() {
                candidates.push(p);
            }
        }
        Self::load_first(&candidates)
    }

    /// Loads OpenCL from exactly this path (an ICD loader or a vendor library such as
    /// `libnvidia-opencl.so.1`), trying nothing else.
    pub fn load_from(path: &str) -> Result<Api> {
        Self::load_first(&[path.to_string()])
    }

    /// Tries each path in order; returns the first that opens and has every entry point.
    /// A library that opens but lacks a symbol is reported as [`Error::MissingSymbol`] only if
    /// no later candidate succeeds.
    pub fn load_first(paths: &[String]) -> Result<Api> {
        let mut tried = Vec::new();
        let mut missing = None;
        for p in paths {
            match open(p) {
                Ok(lib) => match Api::resolve(lib, p.clone()) {
                    Ok(api) => return Ok(api),
                    Err(e) => missing = Some(e),
                },
                Err(why) => tried.push((p.clone(), why)),
            }
        }
        Err(missing.unwrap_or(Error::LibraryNotFound { tried }))
    }

    /// The path the library was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }
}

/// Takes an entry point out of the table or returns [`Error::MissingSymbol`] (never happens for
/// a table built by [`Api::resolve`], which checks every symbol; kept so no path can panic).
macro_rules! clf {
    ($api:expr, $name:ident) => {
        $api.$name
            .ok_or($crate::error::Error::MissingSymbol(stringify!($name)))?
    };
}
pub(crate) use clf;
