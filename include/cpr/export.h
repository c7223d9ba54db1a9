/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/export.h - CPR_API marks what the CPR libraries export. Everything is
 * built with hidden visibility by default (-fvisibility=hidden), so a shared
 * library exports exactly the functions declared CPR_API in include/cpr/;
 * internal helpers stay inside it whatever their names.
 */
#ifndef CPR_EXPORT_H
#define CPR_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define CPR_API __attribute__((visibility("default")))
#else
#define CPR_API
#endif

#endif /* CPR_EXPORT_H */
