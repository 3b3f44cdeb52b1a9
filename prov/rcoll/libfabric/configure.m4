dnl Configury specific to the libfabric rcoll provider.
dnl
dnl This file is rcoll's drop-in for libfabric's own source tree:
dnl scripts/libfabric-dropin.sh copies it to prov/rcoll/configure.m4 there
dnl and adds FI_PROVIDER_SETUP([rcoll]) to libfabric's configure.ac.
dnl (rcoll's own build does not use it.)

dnl Called to configure this provider
dnl
dnl Arguments:
dnl
dnl $1: action if configured successfully
dnl $2: action if not configured successfully
dnl
dnl rcoll is written in C++20, libfabric in C. The C++ compiler and
dnl libtool's CXX tag are set up on every configure, rcoll enabled or not:
dnl automake's C++ rules and their dependency-tracking conditional
dnl (am__fastdepCXX) must be defined unconditionally, or config.status
dnl fails when rcoll is disabled. It only looks for a compiler; the C
dnl providers are untouched. AC_REQUIRE puts the compiler search before
dnl FI_PROVIDER_SETUP([rcoll]) in configure; LT_LANG([C++]) comes first,
dnl since in the other order autoconf warns that AC_PROG_CXX "was expanded
dnl before it was required" and expands it twice. autogen.sh still warns
dnl "LT_OUTPUT was called before LT_LANG": libfabric's configure.ac writes
dnl an early libtool script (LT_OUTPUT) right after LT_INIT, without the CXX
dnl tag; the libtool that config.status writes at the end, which the build
dnl uses, has it.
dnl
dnl Shell variable outputs (AC_SUBST):
dnl
dnl rcoll_CXXFLAGS: the flags rcoll's sources need (-std=c++20)
dnl rcoll_LIBS: what libfabric.so needs when rcoll is built into it
dnl             (the C++ runtime, -lstdc++: libfabric is linked by the C
dnl             compiler); empty for --enable-rcoll=dl
dnl
AC_DEFUN([FI_RCOLL_CONFIGURE],[
	# Determine if we can support the rcoll provider
	rcoll_happy=0
	rcoll_CXXFLAGS=
	rcoll_LIBS=
	LT_LANG([C++])
	AC_REQUIRE([AC_PROG_CXX])
	AS_IF([test x"$enable_rcoll" != x"no"],
	      [AC_LANG_PUSH([C++])
	       AC_MSG_CHECKING([whether $CXX compiles and links C++20])
	       rcoll_save_CXXFLAGS=$CXXFLAGS
	       CXXFLAGS="$CXXFLAGS -std=c++20"
	       AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <concepts>
#include <span>
#include <string>]],
			[[int a[2] = {1, 2};
			  std::span<int> s(a);
			  std::string t(s.size(), 'x');
			  return std::same_as<decltype(s)::element_type, int> ? 0 : int(t.size());]])],
			[AC_MSG_RESULT([yes])
			 rcoll_happy=1
			 rcoll_CXXFLAGS="-std=c++20"],
			[AC_MSG_RESULT([no])
			 AC_MSG_WARN([rcoll needs a C++20 compiler (CXX=$CXX)])])
	       CXXFLAGS=$rcoll_save_CXXFLAGS
	       AC_LANG_POP([C++])])

	# Built into libfabric.so (yes, or auto), rcoll's objects need the
	# C++ runtime: libfabric.so is linked by the C compiler.
	AS_IF([test $rcoll_happy -eq 1 && test $rcoll_dl -eq 0],
	      [AC_CHECK_LIB([stdc++], [__cxa_begin_catch],
			    [rcoll_LIBS=-lstdc++],
			    [AC_MSG_WARN([rcoll built into libfabric needs libstdc++])
			     rcoll_happy=0])])

	AC_SUBST([rcoll_CXXFLAGS])
	AC_SUBST([rcoll_LIBS])
	AS_IF([test $rcoll_happy -eq 1], [$1], [$2])
])
